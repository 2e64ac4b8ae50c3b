/*
 * core/mem.c - page-aligned allocations (core.h): variable components,
 * staging buffers and writer buffers, so O_DIRECT writes take them as they
 * are; copies that leave the cache alone (dvar_copy_stream); and
 * dvar_free, for what the library hands out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define PAGE ((size_t)4096)
#define HUGE_PAGE ((size_t)2 << 20)

void *dvar_page_alloc(size_t size, int zero)
{
	void *p = NULL;
	/* Large buffers go on huge pages, as NumPy's do: first touch faults once
	 * per 2 MiB instead of per 4 KiB, which under a hypervisor's shadow page
	 * tables made a cold restore and a state copy several times slower. Only
	 * whole huge pages are advised, so a tail never pins 2 MiB for a few KiB. */
	size_t align = size >= HUGE_PAGE ? HUGE_PAGE : PAGE;

	if (size == 0)
		size = 1;
	if (posix_memalign(&p, align, size) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	if (align == HUGE_PAGE)
		(void)madvise(p, size / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice only */
#endif
	if (zero)
		memset(p, 0, size);
	return p;
}

void dvar_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
	unsigned char *d = dst;
	const unsigned char *s = src;
	size_t head = (16 - (uintptr_t)d % 16) % 16;

	if (n < head + 64) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
	d += head, s += head, n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	/* Streaming stores are weakly ordered: done before anyone reads them. */
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
}

/* The library's own free(), so a program linked with another allocator
 * releases the library's memory with the allocator that made it. */
void dvar_free(void *p)
{
	free(p);
}

void *dvar_grow(void *arr, size_t len, size_t *cap, size_t elem, size_t first)
{
	if (len < *cap)
		return arr;
	size_t ncap = *cap ? *cap * 2 : first;
	if (ncap < *cap || ncap > SIZE_MAX / elem)
		return NULL;
	void *p = realloc(arr, ncap * elem);
	if (p)
		*cap = ncap;
	return p;
}
