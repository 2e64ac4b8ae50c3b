/*
 * fuzz/fuzz.h - what the libFuzzer targets share: a check that aborts (so
 * libFuzzer reports the input) when a decoder accepted something it then
 * misdecodes, and a memfd holding the input for decoders that read files.
 * Each target is one LLVMFuzzerTestOneInput over one family of decoders of
 * outside bytes; scripts/fuzz.sh builds and runs them (docs/FORMAT.md's
 * rules are what they hold the decoders to).
 */
#ifndef DVAR_FUZZ_H
#define DVAR_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dvar/dvar.h"

/* A decoded value that breaks a rule: not a crash, but a failure all the same. */
#define FUZZ_CHECK(cond)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                          \
		}                                                                         \
	} while (0)

/* The input as a file (a memfd at offset 0); -1 when none can be had. */
static inline int fuzz_file(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz", 0);
	if (fd < 0)
		return -1;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return -1;
	}
	return fd;
}

#endif
