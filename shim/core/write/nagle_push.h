#pragma once

namespace tlstune {

/*
 * After a send of records the shim held, made later than the program's writes (by the
 * shim's thread, or before a wait): on a TCP socket with Nagle's algorithm on and not
 * corked, where the kernel still holds some of them unsent, they are pushed out
 * (TCP_NODELAY set and cleared, which sends what is queued). Without tlstune the tail of a
 * burst leaves with its second write, at the first acknowledgement; sent later by the
 * shim, Nagle held it behind the second's, which the peer acknowledges late (a median of
 * 8.6 ms against 20 us; pushed, the delay: 232 to 252 us). Not on a corked socket (the
 * program asked for its bytes to wait), nor where the kernel sent everything.
 */
void pushPastNagle(int fd) noexcept;

} /* namespace tlstune */
