/*
 * format/slices.c - the bookkeeping of a variable's slices that both writers
 * (writer.c, tfwriter.c), the gathering of parts (parts.c) and the checks of
 * an index read from disk (entry.c, tf.c) share: one overlap rule, one way
 * to name a slice in messages, one count of a slice's streamed bytes.
 */
#include <stddef.h>
#include <stdio.h>

#include "format/format.h"

/* Callers pass arrays of dvar_slice_entry as arrays of slices with a stride. */
_Static_assert(offsetof(dvar_slice_entry, slice) == 0, "dvar_slice_entry starts with its slice");

static const dvar_slice *slice_at(const void *base, size_t i, size_t stride)
{
	return (const dvar_slice *)(const void *)((const unsigned char *)base + i * stride);
}

int dvar_slice_overlaps(const dvar_slice *s, const void *base, size_t n, size_t stride,
                        int64_t *rows_end, size_t *which)
{
	/* Past the end row of every slice so far: disjoint from all in dimension 0. */
	int after = s->rank > 0 && s->start[0] >= *rows_end;
	if (s->rank > 0 && s->start[0] + s->length[0] > *rows_end)
		*rows_end = s->start[0] + s->length[0];
	for (size_t k = 0; !after && k < n; k++) {
		dvar_slice x;
		uint64_t m = 0;
		if (dvar_slice_intersect(slice_at(base, k, stride), s, &x) == 1 &&
		    dvar_slice_num_elements(&x, &m) == DVAR_OK && m) {
			*which = k;
			return 1;
		}
	}
	return 0;
}

void dvar_slice_describe(char *buf, size_t cap, const dvar_slice *s, const dvar_shape *full)
{
	dvar_slice_format(s, full, buf, cap);
	if (!*buf)
		snprintf(buf, cap, "(scalar)");
}

/* ---------------------------------------------------------------- streams */

void dvar_stream_begin(dvar_stream *st, const dvar_slice *s, const dvar_shape *full,
                       uint64_t bytes, const char *whole)
{
	st->open = 1;
	st->bytes = bytes;
	st->done = 0;
	st->slice = *s;
	st->shape = *full;
	st->whole = whole;
}

/* "slice 4,6:-", or st->whole for a slice that covers its variable. */
static void describe_stream(char *buf, size_t cap, const dvar_stream *st)
{
	char sl[256];
	if (dvar_slice_is_full(&st->slice, &st->shape)) {
		snprintf(buf, cap, "%s", st->whole);
		return;
	}
	dvar_slice_describe(sl, sizeof(sl), &st->slice, &st->shape);
	snprintf(buf, cap, "slice %s", sl);
}

int dvar_stream_take(dvar_stream *st, size_t len)
{
	char what[300];
	if (len <= st->bytes - st->done) {
		st->done += len;
		return DVAR_OK;
	}
	describe_stream(what, sizeof(what), st);
	return dvar_error_set(DVAR_EINVAL, "%s holds %llu bytes; %llu were written and %zu more "
	                      "were given", what, (unsigned long long)st->bytes,
	                      (unsigned long long)st->done, len);
}

int dvar_stream_end(dvar_stream *st)
{
	char what[300];
	if (st->done == st->bytes) {
		st->open = 0;
		return DVAR_OK;
	}
	describe_stream(what, sizeof(what), st);
	return dvar_error_set(DVAR_EINVAL, "%s holds %llu bytes; only %llu were written", what,
	                      (unsigned long long)st->bytes, (unsigned long long)st->done);
}
