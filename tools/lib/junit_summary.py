"""Prints "tests: N passed, N failed, N skipped" from meson's JUnit logs (gtest cases included)."""
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
cases = [case for log in sys.argv[1:] for case in ET.parse(log).getroot().iter("testcase")]
for case in cases:
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
    elif case.find("skipped") is not None:
        skipped += 1
    else:
        passed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
