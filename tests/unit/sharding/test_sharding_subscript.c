/*
 * tests/unit/sharding/test_sharding_subscript.c - subscripts, TF's
 * _decompose_slice_spec (every decomposition and test_slicing case of the
 * reference, §2.7) and the rows a slice selects, cross-checked by brute
 * force against Python's slice rules.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"
#include "dvar/sharding.h"

#define MAX_ROWS 64

/* ------------------------------------------------------------ helpers */

static dvar_subscript parse_one(const char *text)
{
	dvar_subscript item;
	int n = -1;

	if (dvar_subscript_parse(text, &item, 1, &n) != DVAR_OK)
		fail_msg("'%s': %s", text, dvar_error_last()->message);
	assert_int_equal(n, 1);
	return item;
}

/* Python's slice(start, stop, step).indices(len) and the rows it yields:
 * what NumPy and a TF tensor do with a slice. */
static int py_slice(int64_t len, const dvar_subscript *s, int64_t *out)
{
	int64_t step = s->has_step ? s->step : 1;
	int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
	int64_t start, stop;
	int n = 0;

	if (!s->has_start) {
		start = step < 0 ? upper : lower;
	} else {
		start = s->start < 0 ? s->start + len : s->start;
		start = start < lower ? lower : start > upper ? upper : start;
	}
	if (!s->has_stop) {
		stop = step < 0 ? lower : upper;
	} else {
		stop = s->stop < 0 ? s->stop + len : s->stop;
		stop = stop < lower ? lower : stop > upper ? upper : stop;
	}
	for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
		out[n++] = i;
	return n;
}

/* What TF's __getitem__ returns for an axis-0 slice: each shard sliced by
 * its local slice (Python's rules), in shard order, reversed for a
 * negative step. Global row numbers. */
static int tf_getitem(const int64_t *offsets, int64_t n, const dvar_subscript *spec, int64_t *out)
{
	dvar_subscript local[16];
	int present[16], count = 0;
	int64_t step = spec->has_step ? spec->step : 1;

	if (dvar_sharded_decompose_slice(offsets, n, spec, local, present) != DVAR_OK)
		fail_msg("decompose: %s", dvar_error_last()->message);
	for (int64_t k = 0; k < n; k++) {
		int64_t i = step < 0 ? n - 1 - k : k, part[MAX_ROWS];
		int m;

		if (!present[i])
			continue;
		m = py_slice(offsets[i + 1] - offsets[i], &local[i], part);
		for (int j = 0; j < m; j++)
			out[count++] = offsets[i] + part[j];
	}
	return count;
}

static int slice_rows(int64_t rows, const dvar_subscript *spec, int64_t *out)
{
	int64_t count = -1;

	if (dvar_sharded_slice_rows(rows, spec, out, MAX_ROWS, &count) != DVAR_OK)
		fail_msg("slice rows: %s", dvar_error_last()->message);
	assert_in_range(count, 0, MAX_ROWS);
	return (int)count;
}

static void assert_rows(const char *what, const int64_t *got, int ngot, const int64_t *want,
                        int nwant)
{
	if (ngot != nwant || memcmp(got, want, (size_t)ngot * sizeof *got) != 0) {
		char text[512];
		size_t len = 0;

		for (int i = 0; i < ngot && len < sizeof text - 24; i++)
			len += (size_t)snprintf(text + len, sizeof text - len, "%s%lld", i ? "," : "",
			                        (long long)got[i]);
		text[len] = '\0';
		fail_msg("%s: got %d rows [%s], want %d", what, ngot, text, nwant);
	}
}

/* ------------------------------------------------------------ parsing */

static void test_sharding_subscript__parse(void **state)
{
	dvar_subscript it[8];
	int n = -1;

	(void)state;
	assert_int_equal(dvar_subscript_parse("2:7:2, 0", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 2);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_SLICE);
	assert_true(it[0].has_start && it[0].has_stop && it[0].has_step);
	assert_int_equal(it[0].start, 2);
	assert_int_equal(it[0].stop, 7);
	assert_int_equal(it[0].step, 2);
	assert_int_equal(it[1].kind, DVAR_SUBSCRIPT_INT);
	assert_int_equal(it[1].index, 0);

	assert_int_equal(dvar_subscript_parse("...,0", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 2);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_ELLIPSIS);
	assert_int_equal(it[1].kind, DVAR_SUBSCRIPT_INT);

	assert_int_equal(dvar_subscript_parse("newaxis, ...", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 2);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_NEWAXIS);
	assert_int_equal(it[1].kind, DVAR_SUBSCRIPT_ELLIPSIS);
	assert_int_equal(dvar_subscript_parse("None", it, 8, &n), DVAR_OK);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_NEWAXIS);

	assert_int_equal(dvar_subscript_parse("::-1", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 1);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_SLICE);
	assert_false(it[0].has_start);
	assert_false(it[0].has_stop);
	assert_true(it[0].has_step);
	assert_int_equal(it[0].step, -1);

	assert_int_equal(dvar_subscript_parse("-3:", it, 8, &n), DVAR_OK);
	assert_true(it[0].has_start);
	assert_int_equal(it[0].start, -3);
	assert_false(it[0].has_stop);
	assert_false(it[0].has_step);

	assert_int_equal(dvar_subscript_parse(":", it, 8, &n), DVAR_OK);
	assert_int_equal(it[0].kind, DVAR_SUBSCRIPT_SLICE);
	assert_false(it[0].has_start || it[0].has_stop || it[0].has_step);
	assert_int_equal(dvar_subscript_parse("::", it, 8, &n), DVAR_OK);
	assert_false(it[0].has_start || it[0].has_stop || it[0].has_step);
	assert_int_equal(dvar_subscript_parse("1:2:", it, 8, &n), DVAR_OK);
	assert_true(it[0].has_start && it[0].has_stop);
	assert_false(it[0].has_step);
	assert_int_equal(dvar_subscript_parse(":5", it, 8, &n), DVAR_OK);
	assert_false(it[0].has_start);
	assert_int_equal(it[0].stop, 5);

	/* spaces anywhere between tokens; one trailing comma (Python's x[0,]) */
	assert_int_equal(dvar_subscript_parse("  1 : 2 :\t3 ,\t-4 , ", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 2);
	assert_int_equal(it[0].start, 1);
	assert_int_equal(it[0].stop, 2);
	assert_int_equal(it[0].step, 3);
	assert_int_equal(it[1].index, -4);
	assert_int_equal(dvar_subscript_parse("0,", it, 8, &n), DVAR_OK);
	assert_int_equal(n, 1);

	assert_int_equal(dvar_subscript_parse("+3, -9223372036854775808, 9223372036854775807", it, 8,
	                                  &n),
	                 DVAR_OK);
	assert_int_equal(n, 3);
	assert_int_equal(it[0].index, 3);
	assert_int_equal(it[1].index, INT64_MIN);
	assert_int_equal(it[2].index, INT64_MAX);

	/* step 0 parses (Python's does); decomposing it fails */
	assert_int_equal(dvar_subscript_parse("::0", it, 8, &n), DVAR_OK);
	assert_true(it[0].has_step);
	assert_int_equal(it[0].step, 0);

	/* exactly cap items */
	assert_int_equal(dvar_subscript_parse("1,2", it, 2, &n), DVAR_OK);
	assert_int_equal(n, 2);
}

static void parse_fails(const char *text, int cap, const char *message)
{
	dvar_subscript it[4];
	int n = 77;

	assert_int_equal(dvar_subscript_parse(text, it, cap, &n), DVAR_EINVAL);
	if (strcmp(dvar_error_last()->message, message) != 0)
		fail_msg("'%s': got \"%s\", want \"%s\"", text, dvar_error_last()->message, message);
	assert_int_equal(n, 77);
}

static void test_sharding_subscript__parse_errors(void **state)
{
	dvar_subscript it[1];
	int n;

	(void)state;
	parse_fails("", 4, "index '' is empty");
	parse_fails("   ", 4, "index '   ' is empty");
	parse_fails("1,,2", 4, "index '1,,2': empty item at position 3");
	parse_fails(",1", 4, "index ',1': empty item at position 1");
	parse_fails("1,,", 4, "index '1,,': empty item at position 3");
	parse_fails("1:2:3:4", 4, "index '1:2:3:4': unexpected ':' at position 6");
	parse_fails("1 2", 4, "index '1 2': unexpected '2' at position 3");
	parse_fails("1.5", 4, "index '1.5': unexpected '.' at position 2");
	parse_fails("--1", 4, "index '--1': unexpected '-' at position 1");
	parse_fails("1:-", 4, "index '1:-': unexpected '-' at position 3");
	parse_fails("[1]", 4, "index '[1]': unexpected '[' at position 1");
	parse_fails("1\x01", 4, "index '1\x01': unexpected byte 0x01 at position 2");
	parse_fails("abc", 4,
	            "index 'abc': unknown name 'abc' at position 1 (expected an integer, a slice, "
	            "'...', 'newaxis' or 'None')");
	parse_fails("0, newaxisx", 4,
	            "index '0, newaxisx': unknown name 'newaxisx' at position 4 (expected an "
	            "integer, a slice, '...', 'newaxis' or 'None')");
	parse_fails("..", 4,
	            "index '..': unknown name '..' at position 1 (expected an integer, a slice, "
	            "'...', 'newaxis' or 'None')");
	parse_fails("..., 0, ...", 4,
	            "index '..., 0, ...': a second '...' at position 9 (an index can have only one)");
	parse_fails("9223372036854775808", 4,
	            "index '9223372036854775808': the number at position 1 is outside the 64-bit "
	            "range");
	parse_fails("0:-9223372036854775809", 4,
	            "index '0:-9223372036854775809': the number at position 3 is outside the 64-bit "
	            "range");
	parse_fails("1,2,3", 2, "index '1,2,3': more than 2 items");
	parse_fails("1", 0, "index '1': more than 0 items");
	assert_int_equal(dvar_subscript_parse(NULL, it, 1, &n), DVAR_EINVAL);
	assert_int_equal(dvar_subscript_parse("1", NULL, 1, &n), DVAR_EINVAL);
	assert_int_equal(dvar_subscript_parse("1", it, 1, NULL), DVAR_EINVAL);
	assert_int_equal(dvar_subscript_parse("1", it, -1, &n), DVAR_EINVAL);
}

/* ------------------------------------------------------------ decomposition */

/* One expected local slice: TF's slice(start, stop, step), or None. */
typedef struct {
	int present;
	int64_t start, stop;
	int has_stop;
	int64_t step;
} want_local;

#define NONE { 0, 0, 0, 0, 0 }
#define SL(a, b, c) { 1, a, b, 1, c }
#define SL_OPEN(a, c) { 1, a, 0, 0, c }

static void check_decomposition(const int64_t *offsets, int64_t n, const char *text,
                                const want_local *want)
{
	dvar_subscript spec = parse_one(text), local[8];
	int present[8];

	assert_int_equal(dvar_sharded_decompose_slice(offsets, n, &spec, local, present), DVAR_OK);
	for (int64_t i = 0; i < n; i++) {
		const want_local *w = &want[i];
		const dvar_subscript *l = &local[i];

		if (present[i] != w->present)
			fail_msg("[%s] shard %lld: present %d, want %d", text, (long long)i, present[i],
			         w->present);
		assert_int_equal(l->kind, DVAR_SUBSCRIPT_SLICE);
		if (!w->present) {
			/* None: an empty slice, in case a caller ignores present */
			assert_true(l->has_start && l->has_stop);
			assert_int_equal(l->start, 0);
			assert_int_equal(l->stop, 0);
			continue;
		}
		if (!l->has_start || !l->has_step || l->start != w->start || l->step != w->step ||
		    l->has_stop != w->has_stop || (w->has_stop && l->stop != w->stop))
			fail_msg("[%s] shard %lld: slice(%lld, %s%lld, %lld), want slice(%lld, %s%lld, "
			         "%lld)",
			         text, (long long)i, (long long)l->start, l->has_stop ? "" : "None/",
			         (long long)l->stop, (long long)l->step, (long long)w->start,
			         w->has_stop ? "" : "None/", (long long)w->stop, (long long)w->step);
	}
}

/* The docstring's shards v0=[0,1,2], v1=[3,4,5], v2=[6,7,8,9]. */
static void test_sharding_subscript__docstring_decompositions(void **state)
{
	static const int64_t off[] = { 0, 3, 6, 10 };
	static const struct {
		const char *text;
		want_local want[3];
		int n;
		int64_t values[10];
	} cases[] = {
		{ ":", { SL(0, 3, 1), SL(0, 3, 1), SL(0, 4, 1) }, 10, { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 } },
		{ "2:8:3", { SL(2, 3, 3), SL(2, 3, 3), NONE }, 2, { 2, 5 } },
		{ "9:3:-2", { NONE, SL(2, 0, -2), SL_OPEN(3, -2) }, 3, { 9, 7, 5 } },
		{ "::-1", { SL_OPEN(2, -1), SL_OPEN(2, -1), SL_OPEN(3, -1) }, 10,
		  { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 } },
		{ "5:1:-1", { SL(2, 1, -1), SL_OPEN(2, -1), NONE }, 4, { 5, 4, 3, 2 } },
		{ "-3:", { NONE, NONE, SL(1, 4, 1) }, 3, { 7, 8, 9 } },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		dvar_subscript spec = parse_one(cases[i].text);
		int64_t got[MAX_ROWS];
		int n;

		check_decomposition(off, 3, cases[i].text, cases[i].want);
		n = tf_getitem(off, 3, &spec, got);
		assert_rows(cases[i].text, got, n, cases[i].values, cases[i].n);
		n = slice_rows(10, &spec, got);
		assert_rows(cases[i].text, got, n, cases[i].values, cases[i].n);
	}
}

/* sharded_variable_test.py's test_slicing: shards data[:3], data[3:6],
 * data[6:] of 8 rows. Row r holds [2r+1, 2r+2], so the expected rows are
 * the reference's values as row numbers. */
static const struct {
	const char *text;
	int n;
	int64_t rows[8];
} slicing[] = {
	{ ":", 8, { 0, 1, 2, 3, 4, 5, 6, 7 } },
	{ ":2", 2, { 0, 1 } },
	{ "-8:2", 2, { 0, 1 } },
	{ "-10:2", 2, { 0, 1 } },
	{ "5:", 3, { 5, 6, 7 } },
	{ "5:-1", 2, { 5, 6 } },
	{ "::3", 3, { 0, 3, 6 } },
	{ "::5", 2, { 0, 5 } },
	{ "1::6", 2, { 1, 7 } },
	{ "1:5:6", 1, { 1 } },
	{ "1::7", 1, { 1 } },
	{ "2:7", 5, { 2, 3, 4, 5, 6 } },
	{ "2:7:2", 3, { 2, 4, 6 } },
	{ "2:7:3", 2, { 2, 5 } },
	{ "::-1", 8, { 7, 6, 5, 4, 3, 2, 1, 0 } },
	{ "2::-1", 3, { 2, 1, 0 } },
	{ "2:-8:-1", 2, { 2, 1 } },
	{ "2:-10:-1", 3, { 2, 1, 0 } },
	{ "4::-1", 5, { 4, 3, 2, 1, 0 } },
	{ "-1:-3:-1", 2, { 7, 6 } },
	{ "::-5", 2, { 7, 2 } },
	{ "6::-6", 2, { 6, 0 } },
	{ "6:5:-6", 1, { 6 } },
	{ "6::-7", 1, { 6 } },
	{ "7:1:-1", 6, { 7, 6, 5, 4, 3, 2 } },
	{ "7:1:-2", 3, { 7, 5, 3 } },
	{ "7:1:-4", 2, { 7, 3 } },
	/* empty */
	{ "0:0", 0, { 0 } },
	{ "5:3", 0, { 0 } },
	{ "3:5:-1", 0, { 0 } },
	{ "-1:0", 0, { 0 } },
	{ "2:-1:-1", 0, { 0 } }, /* -1 + 8 = 7, and 2:7:-1 is empty */
	/* the quirk (reference §2.7, §8.6): TF gives row 1, NumPy row 0 */
	{ "-10:2:3", 1, { 1 } },
};

static void test_sharding_subscript__test_slicing(void **state)
{
	static const int64_t off[] = { 0, 3, 6, 8 };

	(void)state;
	for (size_t i = 0; i < sizeof slicing / sizeof slicing[0]; i++) {
		dvar_subscript spec = parse_one(slicing[i].text);
		int64_t got[MAX_ROWS];
		int n;

		n = tf_getitem(off, 3, &spec, got);
		assert_rows(slicing[i].text, got, n, slicing[i].rows, slicing[i].n);
		n = slice_rows(8, &spec, got);
		assert_rows(slicing[i].text, got, n, slicing[i].rows, slicing[i].n);
	}
	/* NumPy differs on the quirk only */
	{
		dvar_subscript spec = parse_one("-10:2:3");
		int64_t got[MAX_ROWS];

		assert_int_equal(py_slice(8, &spec, got), 1);
		assert_int_equal(got[0], 0);
	}
	/* The same quirk from the other end (derived, not in TF's tests): a
	 * start past the rows with step < -1 is not clamped to rows - 1.
	 * sv[11::-3]: TF rows 5, 2; NumPy rows 7, 4, 1. */
	{
		static const int64_t tf[] = { 5, 2 }, np[] = { 7, 4, 1 };
		dvar_subscript spec = parse_one("11::-3");
		int64_t got[MAX_ROWS];
		int n;

		n = tf_getitem(off, 3, &spec, got);
		assert_rows("11::-3", got, n, tf, 2);
		n = slice_rows(8, &spec, got);
		assert_rows("11::-3", got, n, tf, 2);
		n = py_slice(8, &spec, got);
		assert_rows("11::-3 (Python)", got, n, np, 3);
	}
}

/* The same slices over the docstring's 10 rows (3, 3, 4): the shards
 * together select what one 10-row shard would, and, the quirk aside,
 * what Python selects. */
static void test_sharding_subscript__slicing_ten_rows(void **state)
{
	static const int64_t off[] = { 0, 3, 6, 10 };

	(void)state;
	for (size_t i = 0; i < sizeof slicing / sizeof slicing[0]; i++) {
		dvar_subscript spec = parse_one(slicing[i].text);
		int64_t a[MAX_ROWS], b[MAX_ROWS], c[MAX_ROWS];
		int na = tf_getitem(off, 3, &spec, a);
		int nb = slice_rows(10, &spec, b);
		int nc = py_slice(10, &spec, c);

		assert_rows(slicing[i].text, a, na, b, nb);
		if (strcmp(slicing[i].text, "-10:2:3") != 0)
			assert_rows(slicing[i].text, b, nb, c, nc);
	}
	{
		/* 10 rows: -10 + 10 = 0, no quirk; -12:2:3 has it: TF row 1, NumPy 0 */
		dvar_subscript spec = parse_one("-12:2:3");
		int64_t got[MAX_ROWS];

		assert_int_equal(slice_rows(10, &spec, got), 1);
		assert_int_equal(got[0], 1);
		assert_int_equal(py_slice(10, &spec, got), 1);
		assert_int_equal(got[0], 0);
	}
}

/* A start that is out of range on the side the slice starts from (below
 * -rows with step > 1, at or past rows with step < -1) is not clamped
 * by TF: the progression keeps its phase. */
static int is_quirk(int64_t rows, const dvar_subscript *s)
{
	int64_t step = s->has_step ? s->step : 1, start;

	if (!s->has_start || (step >= -1 && step <= 1))
		return 0;
	start = s->start < 0 ? s->start + rows : s->start;
	return step > 0 ? start < 0 : start > rows - 1;
}

/* The unclamped model: start, start + step, ... kept while inside the
 * rows and before stop (both normalized as TF does). */
static int no_clamp(int64_t rows, const dvar_subscript *s, int64_t *out)
{
	int64_t step = s->has_step ? s->step : 1, start, stop;
	int n = 0;

	start = !s->has_start ? (step > 0 ? 0 : rows - 1) :
	        s->start < 0 ? s->start + rows : s->start;
	stop = !s->has_stop ? (step > 0 ? rows : -1) : s->stop < 0 ? s->stop + rows : s->stop;
	for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
		if (i >= 0 && i < rows)
			out[n++] = i;
	return n;
}

/*
 * Every start, stop (-13..13 and omitted) and step (-4..4 but 0, and
 * omitted) over 0..8 rows, cut into every layout of 1, 2 or 3 shards
 * (empty shards included): the shards' local slices select exactly
 * dvar_sharded_slice_rows, which is always the unclamped progression and
 * is Python's slice except in the quirk.
 */
static void test_sharding_subscript__brute_force(void **state)
{
	int quirks = 0, cases = 0;

	(void)state;
	for (int64_t rows = 0; rows <= 8; rows++) {
		for (int hs = 0; hs < 2; hs++)
		for (int64_t start = hs ? -13 : 0; start <= (hs ? 13 : 0); start++)
		for (int hp = 0; hp < 2; hp++)
		for (int64_t stop = hp ? -13 : 0; stop <= (hp ? 13 : 0); stop++)
		for (int he = 0; he < 2; he++)
		for (int64_t step = he ? -4 : 1; step <= (he ? 4 : 1); step++) {
			dvar_subscript spec = { .kind = DVAR_SUBSCRIPT_SLICE };
			int64_t mine[MAX_ROWS], py[MAX_ROWS], other[MAX_ROWS];
			int nm, np;

			if (step == 0)
				continue;
			spec.has_start = hs;
			spec.start = start;
			spec.has_stop = hp;
			spec.stop = stop;
			spec.has_step = he;
			spec.step = he ? step : 0;
			cases++;
			nm = slice_rows(rows, &spec, mine);
			np = py_slice(rows, &spec, py);
			assert_rows("no-clamp model", mine, nm, other, no_clamp(rows, &spec, other));
			if (nm != np || memcmp(mine, py, (size_t)nm * sizeof *mine) != 0) {
				if (!is_quirk(rows, &spec))
					fail_msg("%lld rows, %s%lld:%s%lld:%s%lld differs from Python",
					         (long long)rows, hs ? "" : "_", (long long)start,
					         hp ? "" : "_", (long long)stop, he ? "" : "_",
					         (long long)step);
				quirks++;
			}
			/* every layout of up to 3 shards */
			for (int64_t a = 0; a <= rows; a++) {
				for (int64_t b = a; b <= rows; b++) {
					const int64_t one[] = { 0, rows }, two[] = { 0, a, rows },
					              three[] = { 0, a, b, rows };
					int n;

					if (b == a) {
						if (a == 0) {
							n = tf_getitem(one, 1, &spec, other);
							assert_rows("1 shard", other, n, mine, nm);
						}
						n = tf_getitem(two, 2, &spec, other);
						assert_rows("2 shards", other, n, mine, nm);
					}
					n = tf_getitem(three, 3, &spec, other);
					assert_rows("3 shards", other, n, mine, nm);
				}
			}
		}
	}
	/* The quirk shows up, and only where expected (checked above). */
	assert_true(quirks > 100);
	assert_true(cases > 50000);
}

/* ------------------------------------------------------------ big numbers */

static void test_sharding_subscript__huge(void **state)
{
	dvar_subscript spec;
	int64_t got[4], count;

	(void)state;
	/* counts past any buffer: only cap rows written */
	spec = parse_one("::1");
	assert_int_equal(dvar_sharded_slice_rows(INT64_MAX, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, INT64_MAX);
	assert_int_equal(got[0], 0);
	assert_int_equal(got[3], 3);
	spec = parse_one("::-1");
	assert_int_equal(dvar_sharded_slice_rows(INT64_MAX, &spec, got, 2, &count), DVAR_OK);
	assert_int_equal(count, INT64_MAX);
	assert_int_equal(got[0], INT64_MAX - 1);
	assert_int_equal(got[1], INT64_MAX - 2);
	assert_int_equal(dvar_sharded_slice_rows(5, &spec, NULL, 0, &count), DVAR_OK);
	assert_int_equal(count, 5);

	/* extreme bounds and steps */
	spec = parse_one("0:9223372036854775807:2");
	assert_int_equal(dvar_sharded_slice_rows(5, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, 3);
	assert_int_equal(got[2], 4);
	spec = parse_one("::-9223372036854775808");
	assert_int_equal(dvar_sharded_slice_rows(5, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, 1);
	assert_int_equal(got[0], 4);
	spec = parse_one("::9223372036854775807");
	assert_int_equal(dvar_sharded_slice_rows(5, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, 1);
	assert_int_equal(got[0], 0);
	spec = parse_one("9223372036854775807::-1");
	assert_int_equal(dvar_sharded_slice_rows(3, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, 3);
	assert_int_equal(got[0], 2);
	spec = parse_one("-9223372036854775808:9223372036854775807");
	assert_int_equal(dvar_sharded_slice_rows(3, &spec, got, 4, &count), DVAR_OK);
	assert_int_equal(count, 3);

	/* A start near INT64_MIN keeps its phase, exactly: (-2^63 + 10) mod 3
	 * is 2, so rows 2, 5, 8 (Python: 0, 3, 6, 9). TF's double ceiling
	 * drifts this far out; dvar stays exact (docs/SHARDING.md). */
	spec = parse_one("-9223372036854775808::3");
	{
		const int64_t off[] = { 0, 4, 7, 10 }, want[] = { 2, 5, 8 };
		int64_t rows[MAX_ROWS];
		int n;

		assert_int_equal(dvar_sharded_slice_rows(10, &spec, got, 4, &count), DVAR_OK);
		assert_rows("INT64_MIN start", got, (int)count, want, 3);
		n = tf_getitem(off, 3, &spec, rows);
		assert_rows("INT64_MIN start, 3 shards", rows, n, want, 3);
	}
}

/* ------------------------------------------------------------ errors */

static void test_sharding_subscript__errors(void **state)
{
	const int64_t off[] = { 0, 3, 6, 8 }, from1[] = { 1, 3 }, down[] = { 0, 3, 2, 8 };
	dvar_subscript spec = parse_one("::0"), local[3], item = parse_one("4");
	int present[3];
	int64_t rows[4], count = 99;

	(void)state;
	assert_int_equal(dvar_sharded_decompose_slice(off, 3, &spec, local, present), DVAR_EINVAL);
	assert_string_equal(dvar_error_last()->message, "slice step cannot be zero");
	assert_int_equal(dvar_sharded_slice_rows(8, &spec, rows, 4, &count), DVAR_EINVAL);
	assert_string_equal(dvar_error_last()->message, "slice step cannot be zero");
	assert_int_equal(count, 99);

	assert_int_equal(dvar_sharded_decompose_slice(off, 3, &item, local, present), DVAR_EINVAL);
	tu_assert_error_contains("index item of kind 1 is not a slice");
	spec = parse_one(":");
	assert_int_equal(dvar_sharded_decompose_slice(from1, 1, &spec, local, present),
	                 DVAR_EINVAL);
	tu_assert_error_contains("shard offsets start at 1, not 0");
	assert_int_equal(dvar_sharded_decompose_slice(down, 3, &spec, local, present), DVAR_EINVAL);
	tu_assert_error_contains("shard offsets decrease: offsets[2] = 2 after offsets[1] = 3");
	assert_int_equal(dvar_sharded_decompose_slice(off, 0, &spec, local, present), DVAR_EINVAL);
	tu_assert_error_contains("shard count 0 is less than 1");
	assert_int_equal(dvar_sharded_decompose_slice(NULL, 3, &spec, local, present), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_decompose_slice(off, 3, NULL, local, present), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_decompose_slice(off, 3, &spec, NULL, present), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_decompose_slice(off, 3, &spec, local, NULL), DVAR_EINVAL);

	assert_int_equal(dvar_sharded_slice_rows(-1, &spec, rows, 4, &count), DVAR_EINVAL);
	tu_assert_error_contains("row count -1 is negative");
	assert_int_equal(dvar_sharded_slice_rows(8, &spec, NULL, 4, &count), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_slice_rows(8, &spec, rows, -1, &count), DVAR_EINVAL);
	assert_int_equal(dvar_sharded_slice_rows(8, &spec, rows, 4, NULL), DVAR_EINVAL);
	assert_int_equal(count, 99);
}

/* 0 rows: one empty shard, every slice empty. */
static void test_sharding_subscript__empty(void **state)
{
	const int64_t off[] = { 0, 0 };
	const char *texts[] = { ":", "::-1", "0:5", "-3::2", "5::-3" };
	dvar_subscript local[1];
	int present[1];
	int64_t count;

	(void)state;
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		dvar_subscript spec = parse_one(texts[i]);

		assert_int_equal(dvar_sharded_decompose_slice(off, 1, &spec, local, present), DVAR_OK);
		assert_int_equal(present[0], 0);
		assert_int_equal(dvar_sharded_slice_rows(0, &spec, NULL, 0, &count), DVAR_OK);
		assert_int_equal(count, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sharding_subscript__parse),
		cmocka_unit_test(test_sharding_subscript__parse_errors),
		cmocka_unit_test(test_sharding_subscript__docstring_decompositions),
		cmocka_unit_test(test_sharding_subscript__test_slicing),
		cmocka_unit_test(test_sharding_subscript__slicing_ten_rows),
		cmocka_unit_test(test_sharding_subscript__brute_force),
		cmocka_unit_test(test_sharding_subscript__huge),
		cmocka_unit_test(test_sharding_subscript__errors),
		cmocka_unit_test(test_sharding_subscript__empty),
	};
	return cmocka_run_group_tests_name("sharding/index", tests, NULL, NULL);
}
