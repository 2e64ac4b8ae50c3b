/*
 * sharding/subscript.c - subscripts: the NumPy-style text ("2:7:2, 0",
 * "...", "newaxis"), and ShardedVariable._decompose_slice_spec, which turns
 * a slice of axis 0 into one local slice per shard.
 *
 * The decomposition is TF's algorithm step for step, including its
 * normalization of negative bounds without clamping (docs/SHARDING.md,
 * "Indexing"). Cursor arithmetic runs in 128 bits: a start near INT64_MIN
 * is legal input, and the distance from it to a shard is not an int64.
 */
#include <ctype.h>
#include <string.h>

#include "core/core.h"
#include "dvar/sharding.h"

#ifndef __SIZEOF_INT128__
#error "sharding/index.c needs a compiler with __int128 (gcc or clang, 64-bit)"
#endif
__extension__ typedef __int128 i128;

/* Texts in messages are cut to this many bytes. */
#define TEXT_MAX 200

/* ------------------------------------------------------------ parsing */

typedef struct {
	const char *text;
	const char *s; /* the cursor */
} parser;

/* 1-based, as a person counts the characters of what they typed. */
static int position(const parser *p, const char *at)
{
	return (int)(at - p->text) + 1;
}

static void skip_spaces(parser *p)
{
	while (*p->s && isspace((unsigned char)*p->s))
		p->s++;
}

static int unexpected(const parser *p)
{
	unsigned char c = (unsigned char)*p->s;

	if (!c)
		return dvar_error_set(DVAR_EINVAL, "index '%.*s': unexpected end at position %d",
		                      TEXT_MAX, p->text, position(p, p->s));
	if (isprint(c))
		return dvar_error_set(DVAR_EINVAL, "index '%.*s': unexpected '%c' at position %d",
		                      TEXT_MAX, p->text, c, position(p, p->s));
	return dvar_error_set(DVAR_EINVAL, "index '%.*s': unexpected byte 0x%02x at position %d",
	                      TEXT_MAX, p->text, c, position(p, p->s));
}

static int at_number(const parser *p)
{
	const char *s = p->s;

	if (*s == '-' || *s == '+')
		s++;
	return *s >= '0' && *s <= '9';
}

/* [+-]digits into an int64; the caller checked at_number. */
static int parse_int(parser *p, int64_t *out)
{
	const char *start = p->s;
	int neg = *p->s == '-';
	uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;

	if (*p->s == '-' || *p->s == '+')
		p->s++;
	for (; *p->s >= '0' && *p->s <= '9'; p->s++) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p->s - '0', &v) ||
		    v > limit)
			return dvar_error_set(DVAR_EINVAL,
			                      "index '%.*s': the number at position %d is outside "
			                      "the 64-bit range",
			                      TEXT_MAX, p->text, position(p, start));
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return DVAR_OK;
}

/* An optional number of a slice: absent when the next thing is ':', ',' or
 * the end. */
static int parse_slice_part(parser *p, int64_t *value, int *has)
{
	skip_spaces(p);
	if (!at_number(p)) {
		*has = 0;
		return DVAR_OK;
	}
	*has = 1;
	return parse_int(p, value);
}

/* An int or a slice: [int] [':' [int] [':' [int]]]. */
static int parse_int_or_slice(parser *p, dvar_subscript *item)
{
	int64_t first = 0;
	int has_first;
	int rc = parse_slice_part(p, &first, &has_first);

	if (rc != DVAR_OK)
		return rc;
	skip_spaces(p);
	if (*p->s != ':') {
		if (!has_first)
			return unexpected(p);
		item->kind = DVAR_SUBSCRIPT_INT;
		item->index = first;
		return DVAR_OK;
	}
	item->kind = DVAR_SUBSCRIPT_SLICE;
	item->start = first;
	item->has_start = has_first;
	p->s++;
	rc = parse_slice_part(p, &item->stop, &item->has_stop);
	if (rc != DVAR_OK)
		return rc;
	skip_spaces(p);
	if (*p->s != ':')
		return DVAR_OK;
	p->s++;
	return parse_slice_part(p, &item->step, &item->has_step);
}

static int parse_item(parser *p, dvar_subscript *item)
{
	const char *word = p->s;
	size_t len = 0;

	memset(item, 0, sizeof *item);
	if (strncmp(p->s, "...", 3) == 0) {
		item->kind = DVAR_SUBSCRIPT_ELLIPSIS;
		p->s += 3;
		return DVAR_OK;
	}
	while (isalnum((unsigned char)word[len]) || word[len] == '_' || word[len] == '.')
		len++;
	if (len > 0 && !(word[0] >= '0' && word[0] <= '9')) {
		if ((len == 7 && strncmp(word, "newaxis", 7) == 0) ||
		    (len == 4 && strncmp(word, "None", 4) == 0)) {
			item->kind = DVAR_SUBSCRIPT_NEWAXIS;
			p->s += len;
			return DVAR_OK;
		}
		return dvar_error_set(DVAR_EINVAL,
		                      "index '%.*s': unknown name '%.*s' at position %d (expected an "
		                      "integer, a slice, '...', 'newaxis' or 'None')",
		                      TEXT_MAX, p->text, (int)(len < TEXT_MAX ? len : TEXT_MAX), word,
		                      position(p, word));
	}
	return parse_int_or_slice(p, item);
}

int dvar_subscript_parse(const char *text, dvar_subscript *items, int cap, int *n)
{
	parser p;
	int count = 0;
	const char *ellipsis = NULL;

	if (!text || !n || cap < 0 || (cap > 0 && !items))
		return dvar_error_set(DVAR_EINVAL, "index: %s",
		                      !text ? "text is NULL" : !n ? "n is NULL" :
		                      cap < 0 ? "cap is negative" : "items is NULL");
	p.text = text;
	p.s = text;
	skip_spaces(&p);
	if (!*p.s)
		return dvar_error_set(DVAR_EINVAL, "index '%.*s' is empty", TEXT_MAX, text);
	for (;;) {
		dvar_subscript item;
		const char *start;
		int rc;

		skip_spaces(&p);
		start = p.s;
		if (*p.s == ',' || !*p.s) {
			/* Python's x[0,] is x[0]: one trailing comma is fine. */
			if (!*p.s && count > 0)
				break;
			return dvar_error_set(DVAR_EINVAL, "index '%.*s': empty item at position %d",
			                      TEXT_MAX, text, position(&p, p.s));
		}
		rc = parse_item(&p, &item);
		if (rc != DVAR_OK)
			return rc;
		if (item.kind == DVAR_SUBSCRIPT_ELLIPSIS) {
			if (ellipsis)
				return dvar_error_set(DVAR_EINVAL,
				                      "index '%.*s': a second '...' at position %d "
				                      "(an index can have only one)",
				                      TEXT_MAX, text, position(&p, start));
			ellipsis = start;
		}
		if (count == cap)
			return dvar_error_set(DVAR_EINVAL, "index '%.*s': more than %d item%s", TEXT_MAX,
			                      text, cap, cap == 1 ? "" : "s");
		items[count++] = item;
		skip_spaces(&p);
		if (!*p.s)
			break;
		if (*p.s != ',')
			return unexpected(&p);
		p.s++;
	}
	*n = count;
	return DVAR_OK;
}

/* ------------------------------------------------------------ decomposition */

/* ceil(a / b) for a >= 0 and b > 0. TF computes int(math.ceil(a / b)) in
 * doubles; the two agree while a < 2^53, i.e. for every start within 2^53
 * of the rows (docs/SHARDING.md says what happens beyond). */
static i128 ceil_div(i128 a, i128 b)
{
	return a / b + (a % b != 0);
}

static int check_offsets(const int64_t *offsets, int64_t n)
{
	if (!offsets)
		return dvar_error_set(DVAR_EINVAL, "shard offsets are NULL");
	if (n < 1)
		return dvar_error_set(DVAR_EINVAL, "shard count %lld is less than 1", (long long)n);
	if (offsets[0] != 0)
		return dvar_error_set(DVAR_EINVAL, "shard offsets start at %lld, not 0",
		                      (long long)offsets[0]);
	for (int64_t i = 0; i < n; i++)
		if (offsets[i + 1] < offsets[i])
			return dvar_error_set(DVAR_EINVAL,
			                      "shard offsets decrease: offsets[%lld] = %lld after "
			                      "offsets[%lld] = %lld",
			                      (long long)(i + 1), (long long)offsets[i + 1], (long long)i,
			                      (long long)offsets[i]);
	return DVAR_OK;
}

static int check_slice(const dvar_subscript *spec)
{
	if (!spec)
		return dvar_error_set(DVAR_EINVAL, "slice spec is NULL");
	if (spec->kind != DVAR_SUBSCRIPT_SLICE)
		return dvar_error_set(DVAR_EINVAL, "index item of kind %d is not a slice", spec->kind);
	if (spec->has_step && spec->step == 0)
		return dvar_error_set(DVAR_EINVAL, "slice step cannot be zero");
	return DVAR_OK;
}

/* A shard TF gives None: present 0, and an empty slice so that a caller
 * who forgets present still selects nothing. */
static void set_none(dvar_subscript *local, int *present, int64_t step)
{
	memset(local, 0, sizeof *local);
	local->kind = DVAR_SUBSCRIPT_SLICE;
	local->has_start = local->has_stop = local->has_step = 1;
	local->step = step;
	*present = 0;
}

static void set_local(dvar_subscript *local, int *present, int64_t start, int64_t stop, int has_stop,
                      int64_t step)
{
	memset(local, 0, sizeof *local);
	local->kind = DVAR_SUBSCRIPT_SLICE;
	local->start = start;
	local->has_start = 1;
	local->stop = has_stop ? stop : 0;
	local->has_stop = has_stop;
	local->step = step;
	local->has_step = 1;
	*present = 1;
}

int dvar_sharded_decompose_slice(const int64_t *offsets, int64_t n, const dvar_subscript *spec,
                                 dvar_subscript *local, int *present)
{
	int64_t rows, step;
	i128 start, stop, cur;
	int rc;

	if ((rc = check_offsets(offsets, n)) != DVAR_OK || (rc = check_slice(spec)) != DVAR_OK)
		return rc;
	if (!local || !present)
		return dvar_error_set(DVAR_EINVAL, "decompose slice: %s is NULL",
		                      local ? "present" : "local");
	rows = offsets[n];
	step = spec->has_step ? spec->step : 1;
	/* Normalize once; no clamping (TF's quirk: sv[-10:2:3] selects row 1). */
	if (!spec->has_start)
		start = step > 0 ? 0 : (i128)rows - 1;
	else
		start = spec->start < 0 ? (i128)spec->start + rows : spec->start;
	if (!spec->has_stop)
		stop = step > 0 ? rows : -1;
	else
		stop = spec->stop < 0 ? (i128)spec->stop + rows : spec->stop;

	/* cur moves only between shards; within one, the local step does. */
	cur = start;
	if (step > 0) {
		for (int64_t i = 0; i < n; i++) {
			i128 vs = offsets[i], ve = offsets[i + 1];

			if (cur < vs)
				cur += step * ceil_div(vs - cur, step);
			if (cur >= ve || cur >= stop)
				set_none(&local[i], &present[i], step);
			else
				set_local(&local[i], &present[i], (int64_t)(cur - vs),
				          (int64_t)((stop < ve ? stop : ve) - vs), 1, step);
		}
	} else {
		for (int64_t i = n - 1; i >= 0; i--) {
			i128 vs = offsets[i], ve = offsets[i + 1];

			if (cur >= ve)
				cur += step * ceil_div(cur - ve + 1, -(i128)step);
			if (cur < vs || cur <= stop)
				set_none(&local[i], &present[i], step);
			else if (stop >= vs)
				set_local(&local[i], &present[i], (int64_t)(cur - vs), (int64_t)(stop - vs),
				          1, step);
			else
				set_local(&local[i], &present[i], (int64_t)(cur - vs), 0, 0, step);
		}
	}
	return DVAR_OK;
}

int dvar_sharded_slice_rows(int64_t rows, const dvar_subscript *spec, int64_t *rows_out, int64_t cap,
                            int64_t *count)
{
	/* One shard holding every row: its local slice is the whole answer,
	 * since the selection does not depend on where shards begin (cur
	 * always lands on the same progression). */
	int64_t offsets[2] = { 0, rows };
	dvar_subscript local;
	int present, rc;
	i128 total, first, step;

	if (rows < 0)
		return dvar_error_set(DVAR_EINVAL, "slice rows: row count %lld is negative",
		                      (long long)rows);
	if (!count || cap < 0 || (cap > 0 && !rows_out))
		return dvar_error_set(DVAR_EINVAL, "slice rows: %s",
		                      !count ? "count is NULL" : cap < 0 ? "cap is negative" :
		                      "rows_out is NULL");
	rc = dvar_sharded_decompose_slice(offsets, 1, spec, &local, &present);
	if (rc != DVAR_OK)
		return rc;
	if (!present) {
		*count = 0;
		return DVAR_OK;
	}
	first = local.start;
	step = local.step;
	if (step > 0)
		total = ceil_div((i128)local.stop - first, step);
	else
		total = ceil_div(first - (local.has_stop ? (i128)local.stop : -1), -step);
	for (i128 k = 0; k < total && k < cap; k++)
		rows_out[k] = (int64_t)(first + k * step);
	*count = (int64_t)total;
	return DVAR_OK;
}
