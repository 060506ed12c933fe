/*
 * freopen closes the stream's fd as fclose does, inside glibc, then opens the new file,
 * at that number as a rule (a hunt: a socket on stdout lost 40 of its 50 bytes held to
 * freopen of /dev/null); with no path glibc reopens the same file and closes the old
 * number too. The hand-over is close.cpp's (reopenStream).
 *
 * Built without 64-bit file offsets, alone: with them <stdio.h> names freopen freopen64,
 * and the two could not both be defined.
 */
#undef _FILE_OFFSET_BITS

#include <cstdio>

#include "interpose/export.h"

FILE *reopenStream(bool large, const char *path, const char *mode, FILE *stream);

TLSTUNE_EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream)
{
	return reopenStream(false, path, mode, stream);
}

TLSTUNE_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream)
{
	return reopenStream(true, path, mode, stream);
}
