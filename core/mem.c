/*
 * core/mem.c - page-aligned allocations (core.h): variable components,
 * staging buffers and writer buffers, so O_DIRECT writes take them as they
 * are; and dvar_free, for what the library hands out.
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

/* The library's own free(), so a program linked with another allocator
 * releases the library's memory with the allocator that made it. */
void dvar_free(void *p)
{
	free(p);
}
