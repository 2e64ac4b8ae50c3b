/*
 * core/slice.c - slices (hyperrectangles of a full shape): TensorFlow's
 * "start,length:-" text, intersection, and dvar_slice_copy, the strided copy
 * every partial read, reshard and restore goes through.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* Room for 8 x "-9223372036854775808,-9223372036854775808:". */
#define SLICE_TEXT_MAX 400
#define SHAPE_TEXT_MAX 200

static int valid_rank(int32_t rank)
{
	return rank >= 0 && rank <= DVAR_MAX_RANK;
}

/* Append text at *len, keeping buf NUL-terminated; *len grows by the full
 * length even when buf is too small, as snprintf counts. */
static void append(char *buf, size_t cap, size_t *len, const char *text)
{
	size_t n = strlen(text);

	if (*len + 1 < cap) {
		size_t room = cap - 1 - *len;
		size_t k = n < room ? n : room;
		memcpy(buf + *len, text, k);
		buf[*len + k] = '\0';
	}
	*len += n;
}

size_t dvar_slice_format(const dvar_slice *slice, const dvar_shape *full, char *buf, size_t cap)
{
	int32_t rank = valid_rank(slice->rank) ? slice->rank : 0;
	int use_full = full && full->rank == slice->rank;
	size_t len = 0;
	char item[48];

	if (cap > 0)
		buf[0] = '\0';
	for (int32_t d = 0; d < rank; d++) {
		const char *sep = d ? ":" : "";
		if (use_full && slice->start[d] == 0 && slice->length[d] == full->dims[d])
			snprintf(item, sizeof item, "%s-", sep);
		else
			snprintf(item, sizeof item, "%s%lld,%lld", sep, (long long)slice->start[d],
			         (long long)slice->length[d]);
		append(buf, cap, &len, item);
	}
	return len;
}

void dvar_slice_full(dvar_slice *out, const dvar_shape *shape)
{
	memset(out, 0, sizeof *out);
	out->rank = shape->rank;
	for (int32_t d = 0; d < shape->rank && d < DVAR_MAX_RANK; d++)
		out->length[d] = shape->dims[d];
}

int dvar_slice_is_full(const dvar_slice *slice, const dvar_shape *shape)
{
	if (slice->rank != shape->rank || !valid_rank(slice->rank))
		return 0;
	for (int32_t d = 0; d < slice->rank; d++)
		if (slice->start[d] != 0 || slice->length[d] != shape->dims[d])
			return 0;
	return 1;
}

void dvar_slice_shape(const dvar_slice *slice, dvar_shape *out)
{
	memset(out, 0, sizeof *out);
	out->rank = slice->rank;
	for (int32_t d = 0; d < slice->rank && d < DVAR_MAX_RANK; d++)
		out->dims[d] = slice->length[d];
}

/* slice has shape's rank and lies inside it. */
static int fits(const dvar_slice *slice, const dvar_shape *shape)
{
	if (slice->rank != shape->rank)
		return 0;
	for (int32_t d = 0; d < slice->rank; d++) {
		int64_t start = slice->start[d], length = slice->length[d];
		/* dim - start cannot overflow once both are known non-negative. */
		if (start < 0 || length < 0 || shape->dims[d] < 0 || start > shape->dims[d] ||
		    length > shape->dims[d] - start)
			return 0;
	}
	return 1;
}

int dvar_slice_check(const dvar_slice *slice, const dvar_shape *shape)
{
	char stext[SLICE_TEXT_MAX], htext[SHAPE_TEXT_MAX];

	if (!valid_rank(slice->rank))
		return dvar_error_set(DVAR_EINVAL, "slice rank %d is outside 0..%d",
		                      (int)slice->rank, DVAR_MAX_RANK);
	if (fits(slice, shape))
		return DVAR_OK;
	/* Formatted for the message only: a reader checks every slice it opens. */
	dvar_slice_format(slice, NULL, stext, sizeof stext);
	dvar_shape_format(shape, htext, sizeof htext);
	if (slice->rank != shape->rank)
		return dvar_error_set(DVAR_ESHAPE, "slice %s has rank %d but shape %s has rank %d",
		                      stext, (int)slice->rank, htext, (int)shape->rank);
	return dvar_error_set(DVAR_ESHAPE, "slice %s lies outside shape %s", stext, htext);
}

/* A decimal int64 without sign or spaces. Returns 0, or the reason it is not
 * one: 1 not a number, 2 negative, 3 too large. */
static int parse_count(const char **pp, const char *end, int64_t *out)
{
	const char *p = *pp;
	int64_t v = 0;

	if (p < end && *p == '-' && p + 1 < end && p[1] >= '0' && p[1] <= '9')
		return 2;
	if (p >= end || *p < '0' || *p > '9')
		return 1;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v))
			return 3;
	}
	*pp = p;
	*out = v;
	return 0;
}

static int parse_extent(const char *spec, int32_t d, const char *p, const char *end,
                        int64_t full_dim, int64_t *start, int64_t *length)
{
	int why;

	if (p == end)
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d is empty", spec, (int)d);
	if (end - p == 1 && *p == '-') {
		*start = 0;
		*length = full_dim;
		return DVAR_OK;
	}
	why = parse_count(&p, end, start);
	if (why == 0 && (p == end || *p != ','))
		why = 1;
	if (why == 0) {
		p++;
		why = parse_count(&p, end, length);
		if (why == 0 && p != end)
			why = 1;
	}
	switch (why) {
	case 0:
		return DVAR_OK;
	case 2:
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d has a negative number",
		                      spec, (int)d);
	case 3:
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d has a number that "
		                      "overflows 64 bits", spec, (int)d);
	}
	return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d is not 'start,length' or '-'",
	                      spec, (int)d);
}

/* What both slice parsers check of their arguments first. */
static int check_parse_args(const char *spec, const dvar_shape *full)
{
	if (!spec)
		return dvar_error_set(DVAR_EINVAL, "slice text is NULL");
	if (!valid_rank(full->rank))
		return dvar_error_set(DVAR_EINVAL, "shape rank %d is outside 0..%d",
		                      (int)full->rank, DVAR_MAX_RANK);
	return DVAR_OK;
}

/* A slice text of parts dimensions for full's rank. */
static int parts_error(const char *spec, int32_t parts, const dvar_shape *full)
{
	char htext[SHAPE_TEXT_MAX];

	dvar_shape_format(full, htext, sizeof htext);
	return dvar_error_set(DVAR_ESHAPE, "slice '%s' has %d dimension%s but the shape %s has %d",
	                      spec, (int)parts, parts == 1 ? "" : "s", htext, (int)full->rank);
}

int dvar_slice_parse(dvar_slice *out, const char *spec, const dvar_shape *full)
{
	dvar_slice s;
	int32_t parts = 0;
	const char *p;
	int rc;

	if ((rc = check_parse_args(spec, full)) != DVAR_OK)
		return rc;
	memset(&s, 0, sizeof s);
	/* A scalar has nothing to slice: "" or "-". */
	if (full->rank == 0 && (spec[0] == '\0' || strcmp(spec, "-") == 0)) {
		*out = s;
		return DVAR_OK;
	}
	if (spec[0] != '\0') {
		parts = 1;
		for (p = spec; *p; p++)
			parts += *p == ':';
	}
	if (parts != full->rank) {
		return parts_error(spec, parts, full);
	}
	s.rank = parts;
	p = spec;
	for (int32_t d = 0; d < parts; d++) {
		const char *end = strchr(p, ':');

		if (!end)
			end = p + strlen(p);
		rc = parse_extent(spec, d, p, end, full->dims[d], &s.start[d], &s.length[d]);
		if (rc != DVAR_OK)
			return rc;
		p = end + 1;
	}
	rc = dvar_slice_check(&s, full);
	if (rc != DVAR_OK)
		return rc;
	*out = s;
	return DVAR_OK;
}

/* A decimal int64, maybe negative, between spaces; p..end. Returns 0, or 1
 * when it is not one, 3 when it overflows 64 bits. */
static int parse_index(const char *p, const char *end, int64_t *out)
{
	int neg = 0, why;

	while (p < end && *p == ' ')
		p++;
	while (end > p && end[-1] == ' ')
		end--;
	if (p < end && *p == '-') {
		neg = 1;
		p++;
	}
	why = parse_count(&p, end, out);
	if (why == 0 && p != end)
		why = 1;
	if (why == 0 && neg)
		*out = -*out;
	return why;
}

/* 1 when p..end holds nothing but spaces. */
static int blank(const char *p, const char *end)
{
	for (; p < end; p++) {
		if (*p != ' ')
			return 0;
	}
	return 1;
}

/* One dimension of NumPy's text, p..end: ":", "a:b", "a:", ":b" or "a". */
static int parse_numpy_extent(const char *spec, int32_t d, const char *p, const char *end,
                              int64_t dim, int64_t *start, int64_t *length)
{
	const char *colon = memchr(p, ':', (size_t)(end - p));
	int64_t a = 0, b = dim;
	int why = 0;

	if (blank(p, end))
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d is empty", spec, (int)d);
	if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)))
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d has a step, which "
		                      "--slice does not take", spec, (int)d);
	if (!colon) {
		why = parse_index(p, end, &a);
		/* An index is one row, the dimension kept: -1 the last. */
		if (why == 0 && a < 0)
			a += dim;
		b = a < dim ? a + 1 : dim + 1;
	} else {
		if (!blank(p, colon))
			why = parse_index(p, colon, &a);
		if (why == 0 && !blank(colon + 1, end))
			why = parse_index(colon + 1, end, &b);
	}
	if (why == 3)
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d has a number that "
		                      "overflows 64 bits", spec, (int)d);
	if (why != 0)
		return dvar_error_set(DVAR_EINVAL, "slice '%s': dimension %d is not NumPy's "
		                      "'start:stop', ':' or an index (nor is the slice TensorFlow's "
		                      "'start,length' or '-' per dimension)", spec, (int)d);
	/* Negative indices count from the end, as NumPy's do. */
	int64_t from = a < 0 ? a + dim : a, to = b < 0 ? b + dim : b;
	if (from < 0 || to > dim || from > to)
		return dvar_error_set(DVAR_ESHAPE, "slice '%s': dimension %d ('%.*s') is not within "
		                      "its size %lld, or ends before it starts", spec, (int)d,
		                      (int)(end - p), p, (long long)dim);
	*start = from;
	*length = to - from;
	return DVAR_OK;
}

int dvar_slice_parse_numpy(dvar_slice *out, const char *spec, const dvar_shape *full)
{
	dvar_slice s;
	int32_t parts = 1;
	const char *p;
	int rc;

	if ((rc = check_parse_args(spec, full)) != DVAR_OK)
		return rc;
	for (p = spec; *p; p++)
		parts += *p == ',';
	if (parts > full->rank) {
		return parts_error(spec, parts, full);
	}
	/* The dimensions not given are whole, as NumPy's trailing ':'. */
	dvar_slice_full(&s, full);
	p = spec;
	for (int32_t d = 0; d < parts; d++) {
		const char *end = strchr(p, ',');

		if (!end)
			end = p + strlen(p);
		rc = parse_numpy_extent(spec, d, p, end, full->dims[d], &s.start[d], &s.length[d]);
		if (rc != DVAR_OK)
			return rc;
		p = end + 1;
	}
	*out = s;
	return DVAR_OK;
}

/* 1 when every ':'-separated part of spec is "-", or has one ',' and no '-'
 * (TensorFlow's numbers have no sign; NumPy's "-1,-1" is not its). */
static int tf_form(const char *spec)
{
	const char *p = spec;

	for (;;) {
		const char *end = strchr(p, ':');
		int commas = 0, minus = 0;

		if (!end)
			end = p + strlen(p);
		for (const char *q = p; q < end; q++) {
			commas += *q == ',';
			minus += *q == '-';
		}
		if (!(end - p == 1 && *p == '-') && (commas != 1 || minus))
			return 0;
		if (!*end)
			return 1;
		p = end + 1;
	}
}

int dvar_slice_parse_any(dvar_slice *out, const char *spec, const dvar_shape *full)
{
	if (!spec || spec[0] == '\0' || tf_form(spec))
		return dvar_slice_parse(out, spec, full);
	return dvar_slice_parse_numpy(out, spec, full);
}

/* Slices handed to the arithmetic below must have non-negative extents, so
 * that start + length fits in a uint64_t. */
static int check_extents(const dvar_slice *slice, const char *what)
{
	char text[SLICE_TEXT_MAX];

	if (!valid_rank(slice->rank))
		return dvar_error_set(DVAR_EINVAL, "%s rank %d is outside 0..%d", what,
		                      (int)slice->rank, DVAR_MAX_RANK);
	for (int32_t d = 0; d < slice->rank; d++) {
		if (slice->start[d] < 0 || slice->length[d] < 0) {
			dvar_slice_format(slice, NULL, text, sizeof text);
			return dvar_error_set(DVAR_EINVAL, "%s %s has a negative start or length",
			                      what, text);
		}
	}
	return DVAR_OK;
}

static uint64_t end_of(const dvar_slice *s, int32_t d)
{
	return (uint64_t)s->start[d] + (uint64_t)s->length[d];
}

int dvar_slice_intersect(const dvar_slice *a, const dvar_slice *b, dvar_slice *out)
{
	dvar_slice r;
	int rc;

	if (a->rank != b->rank)
		return dvar_error_set(DVAR_EINVAL, "cannot intersect slices of rank %d and %d",
		                      (int)a->rank, (int)b->rank);
	if ((rc = check_extents(a, "slice")) != DVAR_OK || (rc = check_extents(b, "slice")) != DVAR_OK)
		return rc;
	memset(&r, 0, sizeof r);
	r.rank = a->rank;
	for (int32_t d = 0; d < a->rank; d++) {
		int64_t lo = a->start[d] > b->start[d] ? a->start[d] : b->start[d];
		uint64_t ea = end_of(a, d), eb = end_of(b, d);
		uint64_t hi = ea < eb ? ea : eb;

		if (hi <= (uint64_t)lo)
			return 0;
		r.start[d] = lo;
		r.length[d] = (int64_t)(hi - (uint64_t)lo);
	}
	*out = r;
	return 1;
}

int dvar_slice_num_elements(const dvar_slice *slice, uint64_t *out)
{
	char text[SLICE_TEXT_MAX];
	uint64_t n = 1;
	int overflow = 0;
	int rc = check_extents(slice, "slice");

	if (rc != DVAR_OK)
		return rc;
	for (int32_t d = 0; d < slice->rank; d++) {
		if (slice->length[d] == 0) {
			*out = 0;
			return DVAR_OK;
		}
		overflow |= __builtin_mul_overflow(n, (uint64_t)slice->length[d], &n);
	}
	if (overflow) {
		dvar_slice_format(slice, NULL, text, sizeof text);
		return dvar_error_set(DVAR_EINVAL, "slice %s: element count overflows 64 bits", text);
	}
	*out = n;
	return DVAR_OK;
}

/* ---------------------------------------------------------------- copy */

static int check_inside(const dvar_slice *region, const dvar_slice *outer, const char *what)
{
	char rtext[SLICE_TEXT_MAX], otext[SLICE_TEXT_MAX];

	for (int32_t d = 0; d < region->rank; d++) {
		if (region->start[d] < outer->start[d] || end_of(region, d) > end_of(outer, d)) {
			dvar_slice_format(region, NULL, rtext, sizeof rtext);
			dvar_slice_format(outer, NULL, otext, sizeof otext);
			return dvar_error_set(DVAR_ESHAPE, "slice copy: region %s is not inside the %s "
			                      "slice %s", rtext, what, otext);
		}
	}
	return DVAR_OK;
}

/* Byte strides of a row-major buffer holding slice, and the byte offset of
 * region's first element in it. -1 when the buffer could not be addressed. */
static int buffer_layout(const dvar_slice *slice, const dvar_slice *region, size_t esize,
                         size_t *stride, size_t *offset)
{
	size_t s = esize, off = 0;

	for (int32_t d = slice->rank - 1; d >= 0; d--) {
		stride[d] = s;
		off += (size_t)(region->start[d] - slice->start[d]) * s;
		if (__builtin_mul_overflow(s, (size_t)slice->length[d], &s))
			return -1;
	}
	*offset = off;
	return 0;
}

/* n runs of run bytes, a stride apart. */
static inline __attribute__((always_inline)) void
copy_runs_of(unsigned char *dst, size_t dstride, const unsigned char *src, size_t sstride,
             int64_t n, size_t run)
{
	for (int64_t i = 0; i < n; i++, dst += dstride, src += sstride)
		memcpy(dst, src, run);
}

/* Constant sizes let the compiler turn each memcpy into one load and store,
 * which is what column copies (a run of one element) need. */
static void copy_runs(unsigned char *dst, size_t dstride, const unsigned char *src,
                      size_t sstride, int64_t n, size_t run)
{
	switch (run) {
	case 1: copy_runs_of(dst, dstride, src, sstride, n, 1); break;
	case 2: copy_runs_of(dst, dstride, src, sstride, n, 2); break;
	case 4: copy_runs_of(dst, dstride, src, sstride, n, 4); break;
	case 8: copy_runs_of(dst, dstride, src, sstride, n, 8); break;
	case 16: copy_runs_of(dst, dstride, src, sstride, n, 16); break;
	case 32: copy_runs_of(dst, dstride, src, sstride, n, 32); break;
	default: copy_runs_of(dst, dstride, src, sstride, n, run); break;
	}
}

int dvar_slice_copy(int dtype, const dvar_slice *region,
                    const void *src, const dvar_slice *src_slice,
                    void *dst, const dvar_slice *dst_slice)
{
	size_t esize = dvar_dtype_size(dtype);
	size_t sstride[DVAR_MAX_RANK], dstride[DVAR_MAX_RANK], soff, doff, run;
	int64_t idx[DVAR_MAX_RANK] = { 0 };
	const unsigned char *sp;
	unsigned char *dp;
	int32_t rank = region->rank, inner;
	int rc;

	if (esize == 0)
		return dvar_error_set(DVAR_EINVAL, "slice copy: unknown dtype %d", dtype);
	if ((rc = check_extents(region, "slice copy: region")) != DVAR_OK ||
	    (rc = check_extents(src_slice, "slice copy: source slice")) != DVAR_OK ||
	    (rc = check_extents(dst_slice, "slice copy: destination slice")) != DVAR_OK)
		return rc;
	if (src_slice->rank != rank || dst_slice->rank != rank)
		return dvar_error_set(DVAR_ESHAPE, "slice copy: region of rank %d, source slice of "
		                      "rank %d, destination slice of rank %d", (int)rank,
		                      (int)src_slice->rank, (int)dst_slice->rank);
	if ((rc = check_inside(region, src_slice, "source")) != DVAR_OK ||
	    (rc = check_inside(region, dst_slice, "destination")) != DVAR_OK)
		return rc;
	for (int32_t d = 0; d < rank; d++)
		if (region->length[d] == 0)
			return DVAR_OK;
	if (!src || !dst)
		return dvar_error_set(DVAR_EINVAL, "slice copy: NULL buffer");
	if (rank == 0) {
		memcpy(dst, src, esize);
		return DVAR_OK;
	}
	if (buffer_layout(src_slice, region, esize, sstride, &soff) != 0 ||
	    buffer_layout(dst_slice, region, esize, dstride, &doff) != 0)
		return dvar_error_set(DVAR_EINVAL, "slice copy: buffer size overflows size_t");

	/* Trailing dims that region, source and destination all cover whole are
	 * contiguous in both buffers: fold them into one run. */
	inner = rank - 1;
	run = (size_t)region->length[inner] * esize;
	while (inner > 0 && region->length[inner] == src_slice->length[inner] &&
	       region->length[inner] == dst_slice->length[inner]) {
		inner--;
		run *= (size_t)region->length[inner];
	}
	sp = (const unsigned char *)src + soff;
	dp = (unsigned char *)dst + doff;
	if (inner == 0) {
		memcpy(dp, sp, run);
		return DVAR_OK;
	}

	/* Dim inner-1 is the copy_runs loop; an odometer walks dims 0..inner-2. */
	for (;;) {
		int32_t d;

		copy_runs(dp, dstride[inner - 1], sp, sstride[inner - 1],
		          region->length[inner - 1], run);
		for (d = inner - 2; d >= 0; d--) {
			if (++idx[d] < region->length[d]) {
				sp += sstride[d];
				dp += dstride[d];
				break;
			}
			idx[d] = 0;
			sp -= sstride[d] * (size_t)(region->length[d] - 1);
			dp -= dstride[d] * (size_t)(region->length[d] - 1);
		}
		if (d < 0)
			return DVAR_OK;
	}
}

/* ------------------------------------------------------------- walks */

void dvar_slice_walk_init(dvar_slice_walk *w, const dvar_slice *region, uint64_t max_elems)
{
	uint64_t inner = 1, total;
	int k;

	w->region = *region;
	for (int d = 0; d < DVAR_MAX_RANK; d++)
		w->idx[d] = 0;
	w->done = dvar_slice_num_elements(region, &total) != DVAR_OK || total == 0;
	if (w->done || region->rank == 0) {
		w->axis = 0;
		w->run = 1;
		return;
	}
	/*
	 * The outermost axis whose inner block (the dims after it) fits the
	 * budget: it is split in runs, the dims before it one index at a time.
	 */
	for (k = region->rank - 1; k > 0; k--) {
		uint64_t next = inner * (uint64_t)region->length[k];
		if (next > max_elems)
			break;
		inner = next;
	}
	w->axis = k;
	uint64_t run = max_elems / inner;
	w->run = run < (uint64_t)region->length[k] ? (int64_t)run : region->length[k];
}

int dvar_slice_walk_next(dvar_slice_walk *w, dvar_slice *piece, uint64_t *num_elems)
{
	const dvar_slice *r = &w->region;
	int k = w->axis;

	if (w->done)
		return 0;
	*piece = *r;
	for (int d = 0; d < k; d++) {
		piece->start[d] = r->start[d] + w->idx[d];
		piece->length[d] = 1;
	}
	if (r->rank > 0) {
		int64_t left = r->length[k] - w->idx[k];
		piece->start[k] = r->start[k] + w->idx[k];
		piece->length[k] = left < w->run ? left : w->run;
	}
	dvar_slice_num_elements(piece, num_elems);

	/* Advance like an odometer: the run along axis k, then the dims before it. */
	if (r->rank == 0) {
		w->done = 1;
		return 1;
	}
	w->idx[k] += piece->length[k];
	for (int d = k; d >= 0 && w->idx[d] >= r->length[d]; d--) {
		if (d == 0) {
			w->done = 1;
			break;
		}
		w->idx[d] = 0;
		w->idx[d - 1]++;
	}
	return 1;
}
