#!/usr/bin/env python3
"""cpu_of.py OUT COMMAND [ARG]...: runs COMMAND as a child, passes SIGTERM and SIGINT on to
it, and once it has ended writes to OUT the CPU it used, with its threads and the children
it waited for, in ms (user + system). The kernel keeps that sum in ns (wait4); the ticks of
/proc/PID/stat are 10 ms, 5 % of a trickle row of 200 ms. Exits with the child's status."""

import os
import signal
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: cpu_of.py OUT COMMAND [ARG]...")
    out, command = sys.argv[1], sys.argv[2:]
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda received, _frame: os.kill(child, received))
    _, status, usage = os.wait4(child, 0)  # retried across the signals passed on (PEP 475)
    with open(out, "w", encoding="ascii") as cpu:
        cpu.write("%.3f\n" % ((usage.ru_utime + usage.ru_stime) * 1000))
    sys.exit(os.waitstatus_to_exitcode(status))


main()
