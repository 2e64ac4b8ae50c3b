/*
 * core/mem.c - page-aligned allocations (core.h): variable components,
 * staging buffers and writer buffers, so O_DIRECT writes take them as they
 * are.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define PAGE 4096u

void *dvar_page_alloc(size_t size, int zero)
{
	void *p = NULL;

	if (size == 0)
		size = 1;
	if (posix_memalign(&p, PAGE, size) != 0)
		return NULL;
	if (zero)
		memset(p, 0, size);
	return p;
}
