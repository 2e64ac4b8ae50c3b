/*
 * tests/unit/core/test_core_slices.c - slice text (TensorFlow's
 * "start,length:-"), checks, intersection, and dvar_slice_copy against a
 * naive element-by-element reference on random slices of every rank.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "core/core.h"

static dvar_shape shape_of(int32_t rank, const int64_t *dims)
{
	dvar_shape s;
	assert_int_equal(dvar_shape_init(&s, rank, dims), DVAR_OK);
	return s;
}

/* A slice from parallel start/length arrays. */
static dvar_slice slice_of(int32_t rank, const int64_t *start, const int64_t *length)
{
	dvar_slice s;
	memset(&s, 0, sizeof s);
	s.rank = rank;
	for (int32_t d = 0; d < rank; d++) {
		s.start[d] = start[d];
		s.length[d] = length[d];
	}
	return s;
}

static void test_core_slices__full_and_shape(void **state)
{
	const int64_t dims[] = { 4, 3 };
	dvar_shape full = shape_of(2, dims), sub;
	dvar_slice s;

	(void)state;
	dvar_slice_full(&s, &full);
	assert_int_equal(s.rank, 2);
	assert_int_equal(s.start[0], 0);
	assert_int_equal(s.start[1], 0);
	assert_int_equal(s.length[0], 4);
	assert_int_equal(s.length[1], 3);
	assert_true(dvar_slice_is_full(&s, &full));
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_OK);

	s.length[0] = 2;
	assert_false(dvar_slice_is_full(&s, &full));
	dvar_slice_shape(&s, &sub);
	assert_int_equal(sub.rank, 2);
	assert_int_equal(sub.dims[0], 2);
	assert_int_equal(sub.dims[1], 3);

	s.start[0] = 2;
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_OK);
	assert_false(dvar_slice_is_full(&s, &full));

	/* Scalars: the rank-0 slice is the whole thing. */
	full = shape_of(0, NULL);
	dvar_slice_full(&s, &full);
	assert_int_equal(s.rank, 0);
	assert_true(dvar_slice_is_full(&s, &full));
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_OK);
}

static void test_core_slices__check_errors(void **state)
{
	const int64_t dims[] = { 4, 3 };
	const int64_t st[] = { 0, 0 }, len[] = { 5, 3 };
	const int64_t st2[] = { -1, 0 }, len2[] = { 2, 3 };
	const int64_t st3[] = { 2, 0 }, len3[] = { 3, 3 };
	const int64_t st4[] = { 1, 1 }, len4[] = { INT64_MAX, 1 };
	dvar_shape full = shape_of(2, dims);
	dvar_slice s;

	(void)state;
	s = slice_of(2, st, len);
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice 0,5:0,3 lies outside shape [4,3]");
	s = slice_of(2, st2, len2);
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice -1,2:0,3 lies outside shape [4,3]");
	s = slice_of(2, st3, len3);
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice 2,3:0,3 lies outside shape [4,3]");
	s = slice_of(2, st4, len4);
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice 1,9223372036854775807:1,1 lies outside shape [4,3]");
	s = slice_of(1, st, len2);
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice 0,2 has rank 1 but shape [4,3] has rank 2");
	s.rank = 9;
	assert_int_equal(dvar_slice_check(&s, &full), DVAR_EINVAL);
	tu_assert_error_contains("slice rank 9 is outside 0..8");
}

struct parse_case {
	int32_t rank;
	int64_t dims[3];
	const char *spec;
	int64_t start[3], length[3];
	const char *with_full; /* dvar_slice_format(s, full) */
	const char *explicit;  /* dvar_slice_format(s, NULL) */
};

static void test_core_slices__parse_format(void **state)
{
	static const struct parse_case cases[] = {
		{ 2, { 4, 3 }, "0,2:-", { 0, 0 }, { 2, 3 }, "0,2:-", "0,2:0,3" },
		{ 2, { 4, 3 }, "-:-", { 0, 0 }, { 4, 3 }, "-:-", "0,4:0,3" },
		{ 2, { 5, 10 }, "-:0,1", { 0, 0 }, { 5, 1 }, "-:0,1", "0,5:0,1" },
		{ 2, { 5, 10 }, "-:1,9", { 0, 1 }, { 5, 9 }, "-:1,9", "0,5:1,9" },
		/* explicit whole extents come back as "-" when full is given */
		{ 2, { 10, 3 }, "3,3:0,3", { 3, 0 }, { 3, 3 }, "3,3:-", "3,3:0,3" },
		{ 1, { 4 }, "-", { 0 }, { 4 }, "-", "0,4" },
		{ 1, { 4 }, "1,1", { 1 }, { 1 }, "1,1", "1,1" },
		{ 1, { 4 }, "0,4", { 0 }, { 4 }, "-", "0,4" },
		{ 1, { 4 }, "4,0", { 4 }, { 0 }, "4,0", "4,0" },
		{ 1, { 4 }, "007,0", { 7 }, { 0 }, NULL, NULL }, /* outside: parse fails */
		{ 1, { 4 }, "01,02", { 1 }, { 2 }, "1,2", "1,2" },
		{ 1, { 0 }, "-", { 0 }, { 0 }, "-", "0,0" },
		{ 1, { 0 }, "0,0", { 0 }, { 0 }, "-", "0,0" },
		{ 3, { 4, 3, 5 }, "0,4:1,1:3,2", { 0, 1, 3 }, { 4, 1, 2 }, "-:1,1:3,2", "0,4:1,1:3,2" },
		{ 1, { INT64_MAX }, "9223372036854775806,1", { INT64_MAX - 1 }, { 1 },
		  "9223372036854775806,1", "9223372036854775806,1" },
		{ 1, { INT64_MAX }, "-", { 0 }, { INT64_MAX }, "-", "0,9223372036854775807" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct parse_case *c = &cases[i];
		dvar_shape full = shape_of(c->rank, c->dims);
		dvar_slice s, back;
		char buf[128];
		int rc = dvar_slice_parse(&s, c->spec, &full);

		if (!c->with_full) {
			assert_int_equal(rc, DVAR_ESHAPE);
			continue;
		}
		if (rc != DVAR_OK)
			fail_msg("parse '%s': %s", c->spec, dvar_error_last()->message);
		assert_int_equal(s.rank, c->rank);
		for (int32_t d = 0; d < c->rank; d++) {
			assert_int_equal(s.start[d], c->start[d]);
			assert_int_equal(s.length[d], c->length[d]);
		}
		assert_int_equal(dvar_slice_format(&s, &full, buf, sizeof buf), strlen(c->with_full));
		assert_string_equal(buf, c->with_full);
		assert_int_equal(dvar_slice_format(&s, NULL, buf, sizeof buf), strlen(c->explicit));
		assert_string_equal(buf, c->explicit);

		/* Both texts parse back to the same slice. */
		assert_int_equal(dvar_slice_parse(&back, c->with_full, &full), DVAR_OK);
		assert_memory_equal(&back, &s, sizeof s);
		assert_int_equal(dvar_slice_parse(&back, c->explicit, &full), DVAR_OK);
		assert_memory_equal(&back, &s, sizeof s);
	}
}

static void test_core_slices__scalar(void **state)
{
	dvar_shape full = shape_of(0, NULL);
	dvar_slice s;
	char buf[8] = "junk";

	(void)state;
	memset(&s, 0x33, sizeof s);
	assert_int_equal(dvar_slice_parse(&s, "", &full), DVAR_OK);
	assert_int_equal(s.rank, 0);
	memset(&s, 0x33, sizeof s);
	assert_int_equal(dvar_slice_parse(&s, "-", &full), DVAR_OK);
	assert_int_equal(s.rank, 0);
	assert_int_equal(dvar_slice_format(&s, &full, buf, sizeof buf), 0);
	assert_string_equal(buf, "");
	strcpy(buf, "junk");
	assert_int_equal(dvar_slice_format(&s, NULL, buf, sizeof buf), 0);
	assert_string_equal(buf, "");

	assert_int_equal(dvar_slice_parse(&s, "0,1", &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice '0,1' has 1 dimension but the shape [] has 0");
	assert_int_equal(dvar_slice_parse(&s, "-:-", &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice '-:-' has 2 dimensions but the shape [] has 0");
}

struct error_case {
	const char *spec;
	int code;
	const char *message;
};

static void test_core_slices__parse_errors(void **state)
{
	static const struct error_case cases[] = {
		{ "0,2", DVAR_ESHAPE, "slice '0,2' has 1 dimension but the shape [4,3] has 2" },
		{ "", DVAR_ESHAPE, "slice '' has 0 dimensions but the shape [4,3] has 2" },
		{ "-:-:-", DVAR_ESHAPE, "slice '-:-:-' has 3 dimensions but the shape [4,3] has 2" },
		{ "0,2:", DVAR_EINVAL, "slice '0,2:': dimension 1 is empty" },
		{ ":-", DVAR_EINVAL, "slice ':-': dimension 0 is empty" },
		{ "a,b:-", DVAR_EINVAL, "slice 'a,b:-': dimension 0 is not 'start,length' or '-'" },
		{ "-:x", DVAR_EINVAL, "slice '-:x': dimension 1 is not 'start,length' or '-'" },
		{ " 0,2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "0, 2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "0,2 :-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "-:- ", DVAR_EINVAL, "dimension 1 is not 'start,length' or '-'" },
		{ "0:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "0,:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ ",2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "0,2,3:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "--:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "+1,2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "0x1,2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "1e2,2:-", DVAR_EINVAL, "dimension 0 is not 'start,length' or '-'" },
		{ "-1,2:-", DVAR_EINVAL, "slice '-1,2:-': dimension 0 has a negative number" },
		{ "-:0,-3", DVAR_EINVAL, "slice '-:0,-3': dimension 1 has a negative number" },
		{ "99999999999999999999,1:-", DVAR_EINVAL,
		  "slice '99999999999999999999,1:-': dimension 0 has a number that overflows 64 bits" },
		{ "0,9223372036854775808:-", DVAR_EINVAL, "dimension 0 has a number that overflows" },
		{ "3,2:-", DVAR_ESHAPE, "slice 3,2:0,3 lies outside shape [4,3]" },
		{ "0,1:3,1", DVAR_ESHAPE, "slice 0,1:3,1 lies outside shape [4,3]" },
		{ "9223372036854775807,9223372036854775807:-", DVAR_ESHAPE,
		  "slice 9223372036854775807,9223372036854775807:0,3 lies outside shape [4,3]" },
	};
	const int64_t dims[] = { 4, 3 };
	dvar_shape full = shape_of(2, dims);
	dvar_slice s, before;

	(void)state;
	memset(&s, 0x44, sizeof s);
	before = s;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = dvar_slice_parse(&s, cases[i].spec, &full);
		if (rc != cases[i].code)
			fail_msg("'%s' gave %d (%s), want %d", cases[i].spec, rc,
			         dvar_error_last()->message, cases[i].code);
		tu_assert_error_contains(cases[i].message);
		assert_memory_equal(&s, &before, sizeof s);
	}
	assert_int_equal(dvar_slice_parse(&s, NULL, &full), DVAR_EINVAL);
	tu_assert_error_contains("slice text is NULL");
}

struct numpy_case {
	const char *spec;
	int64_t start[2], length[2]; /* of a [10,4] table */
};

/* NumPy's text, and which text dvar_slice_parse_any takes for which. */
static void test_core_slices__parse_numpy(void **state)
{
	static const struct numpy_case ok[] = {
		{ "3:5", { 3, 0 }, { 2, 4 } },   /* the trailing dimension whole */
		{ "3:5,:", { 3, 0 }, { 2, 4 } },
		{ " 2:4 , 1: ", { 2, 1 }, { 2, 3 } },
		{ ":,3", { 0, 3 }, { 10, 1 } },  /* an index keeps its dimension */
		{ "-1", { 9, 0 }, { 1, 4 } },
		{ "-3:-1,:-2", { 7, 0 }, { 2, 2 } },
		{ "4:4", { 4, 0 }, { 0, 4 } },
		{ ":", { 0, 0 }, { 10, 4 } },
	};
	static const struct error_case bad[] = {
		{ "5:3", DVAR_ESHAPE, "dimension 0 ('5:3') is not within its size 10" },
		{ "0:11", DVAR_ESHAPE, "dimension 0 ('0:11') is not within its size 10" },
		{ "10", DVAR_ESHAPE, "dimension 0 ('10') is not within its size 10" },
		{ "-11", DVAR_ESHAPE, "dimension 0 ('-11')" },
		{ "1:2:3", DVAR_EINVAL, "dimension 0 has a step" },
		{ "1:x", DVAR_EINVAL, "dimension 0 is not NumPy's 'start:stop'" },
		{ "1:2,,", DVAR_ESHAPE, "has 3 dimensions but the shape [10,4] has 2" },
		{ ",1", DVAR_EINVAL, "dimension 0 is empty" },
		{ "99999999999999999999:", DVAR_EINVAL, "overflows 64 bits" },
	};
	int64_t dims[2] = { 10, 4 };
	dvar_shape full = shape_of(2, dims);
	dvar_slice s, tf;

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		if (dvar_slice_parse_any(&s, ok[i].spec, &full) != DVAR_OK)
			fail_msg("parse '%s': %s", ok[i].spec, dvar_error_last()->message);
		assert_int_equal(s.rank, 2);
		for (int d = 0; d < 2; d++) {
			assert_int_equal(s.start[d], ok[i].start[d]);
			assert_int_equal(s.length[d], ok[i].length[d]);
		}
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(dvar_slice_parse_numpy(&s, bad[i].spec, &full), bad[i].code);
		tu_assert_error_contains(bad[i].message);
	}
	/* A '-', or one ',' and no '-', in every ':'-part is TensorFlow's text. */
	assert_int_equal(dvar_slice_parse_any(&s, "0,2:-", &full), DVAR_OK);
	assert_int_equal(dvar_slice_parse(&tf, "0,2:-", &full), DVAR_OK);
	assert_memory_equal(&s, &tf, sizeof s);
	assert_int_equal(dvar_slice_parse_any(&s, "1,2", &full), DVAR_ESHAPE);
	tu_assert_error_contains("slice '1,2' has 1 dimension but the shape [10,4] has 2");
	assert_int_equal(dvar_slice_parse_any(&s, "-1,-1", &full), DVAR_OK);
	assert_int_equal(s.start[0] * 10 + s.start[1], 93);
	assert_int_equal(dvar_slice_parse_any(&s, "a,b:-", &full), DVAR_EINVAL);
	tu_assert_error_contains("is not 'start,length' or '-'");
}

static void test_core_slices__format_truncates(void **state)
{
	const int64_t dims[] = { 40, 30 };
	const int64_t st[] = { 10, 0 }, len[] = { 20, 30 };
	dvar_shape full = shape_of(2, dims);
	dvar_slice s = slice_of(2, st, len);
	const int64_t wst[8] = { INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN,
	                         INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN };
	char buf[400];

	(void)state;
	memset(buf, 'x', sizeof buf);
	assert_int_equal(dvar_slice_format(&s, &full, buf, 5), 7);
	assert_string_equal(buf, "10,2");
	assert_int_equal(buf[5], 'x');
	assert_int_equal(dvar_slice_format(&s, &full, buf, 7), 7);
	assert_string_equal(buf, "10,20:");
	assert_int_equal(dvar_slice_format(&s, &full, buf, 8), 7);
	assert_string_equal(buf, "10,20:-");
	assert_int_equal(dvar_slice_format(&s, NULL, buf, 1), 10);
	assert_string_equal(buf, "");
	assert_int_equal(dvar_slice_format(&s, NULL, NULL, 0), 10);

	/* The longest text a slice can have. */
	s = slice_of(8, wst, wst);
	assert_int_equal(dvar_slice_format(&s, NULL, buf, sizeof buf), 8 * 41 + 7);
	assert_int_equal(strlen(buf), 8 * 41 + 7);
}

static void test_core_slices__intersect(void **state)
{
	struct {
		int64_t as, al, bs, bl;
		int nonempty;
		int64_t s, l;
	} cases1[] = {
		{ 0, 4, 2, 4, 1, 2, 2 },   /* overlap */
		{ 0, 10, 3, 2, 1, 3, 2 },  /* b inside a */
		{ 3, 2, 0, 10, 1, 3, 2 },  /* a inside b */
		{ 0, 2, 2, 2, 0, 0, 0 },   /* touching edges share nothing */
		{ 2, 2, 0, 2, 0, 0, 0 },
		{ 0, 2, 5, 2, 0, 0, 0 },   /* disjoint */
		{ 0, 4, 2, 0, 0, 0, 0 },   /* b is empty */
		{ 1, 3, 1, 3, 1, 1, 3 },   /* equal */
		{ 0, 3, 2, 1, 1, 2, 1 },   /* share the last element */
		{ INT64_MAX - 1, 1, 0, INT64_MAX, 1, INT64_MAX - 1, 1 },
	};
	const int64_t z[2] = { 0, 0 };
	dvar_slice a, b, out, keep;

	(void)state;
	for (size_t i = 0; i < sizeof cases1 / sizeof cases1[0]; i++) {
		a = slice_of(1, &cases1[i].as, &cases1[i].al);
		b = slice_of(1, &cases1[i].bs, &cases1[i].bl);
		memset(&out, 0x55, sizeof out);
		keep = out;
		assert_int_equal(dvar_slice_intersect(&a, &b, &out), cases1[i].nonempty);
		if (cases1[i].nonempty) {
			assert_int_equal(out.rank, 1);
			assert_int_equal(out.start[0], cases1[i].s);
			assert_int_equal(out.length[0], cases1[i].l);
		} else {
			assert_memory_equal(&out, &keep, sizeof out);
		}
	}

	/* Rank 2: empty as soon as one dimension is. */
	{
		const int64_t as[] = { 0, 0 }, al[] = { 4, 3 };
		const int64_t bs[] = { 2, 1 }, bl[] = { 5, 5 };
		const int64_t cs[] = { 1, 3 }, cl[] = { 2, 2 };
		a = slice_of(2, as, al);
		b = slice_of(2, bs, bl);
		assert_int_equal(dvar_slice_intersect(&a, &b, &out), 1);
		assert_int_equal(out.start[0], 2);
		assert_int_equal(out.length[0], 2);
		assert_int_equal(out.start[1], 1);
		assert_int_equal(out.length[1], 2);
		b = slice_of(2, cs, cl);
		assert_int_equal(dvar_slice_intersect(&a, &b, &out), 0);
		/* out may alias an input */
		b = slice_of(2, bs, bl);
		assert_int_equal(dvar_slice_intersect(&a, &b, &a), 1);
		assert_int_equal(a.start[0], 2);
		assert_int_equal(a.length[1], 2);
	}

	/* Two scalars always meet. */
	a = slice_of(0, z, z);
	b = slice_of(0, z, z);
	memset(&out, 0x55, sizeof out);
	assert_int_equal(dvar_slice_intersect(&a, &b, &out), 1);
	assert_int_equal(out.rank, 0);

	b = slice_of(1, z, z);
	assert_int_equal(dvar_slice_intersect(&a, &b, &out), DVAR_EINVAL);
	tu_assert_error_contains("rank 0 and 1");
}

static void test_core_slices__num_elements(void **state)
{
	const int64_t st[] = { 1, 2, 3 }, len[] = { 2, 3, 4 };
	const int64_t zl[] = { 2, 0, INT64_MAX };
	const int64_t big[] = { INT64_MAX, INT64_MAX, 2 };
	dvar_slice s = slice_of(3, st, len);
	uint64_t n = 0;

	(void)state;
	assert_int_equal(dvar_slice_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 24);
	s = slice_of(3, st, zl);
	assert_int_equal(dvar_slice_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 0);
	s = slice_of(0, st, len);
	assert_int_equal(dvar_slice_num_elements(&s, &n), DVAR_OK);
	assert_int_equal(n, 1);
	s = slice_of(3, st, big);
	n = 5;
	assert_int_equal(dvar_slice_num_elements(&s, &n), DVAR_EINVAL);
	tu_assert_error_contains("slice 1,9223372036854775807:2,9223372036854775807:3,2: "
	                         "element count overflows 64 bits");
	assert_int_equal(n, 5);
}

/* ---------------------------------------------------------------- copy */

static void test_core_slices__copy_example(void **state)
{
	/* full [4,3] = 0..11; copy the middle 2x2 into its own buffer. */
	const int64_t dims[] = { 4, 3 };
	const int64_t rs[] = { 1, 1 }, rl[] = { 2, 2 };
	dvar_shape full = shape_of(2, dims);
	dvar_slice all, region = slice_of(2, rs, rl);
	int32_t src[12], dst[4] = { -1, -1, -1, -1 }, back[12];

	(void)state;
	for (int i = 0; i < 12; i++)
		src[i] = i;
	dvar_slice_full(&all, &full);
	assert_int_equal(dvar_slice_copy(DVAR_INT32, &region, src, &all, dst, &region), DVAR_OK);
	assert_int_equal(dst[0], 4);
	assert_int_equal(dst[1], 5);
	assert_int_equal(dst[2], 7);
	assert_int_equal(dst[3], 8);

	/* and back into a zeroed full buffer */
	memset(back, 0, sizeof back);
	assert_int_equal(dvar_slice_copy(DVAR_INT32, &region, dst, &region, back, &all), DVAR_OK);
	for (int i = 0; i < 12; i++) {
		int inside = i / 3 >= 1 && i / 3 <= 2 && i % 3 >= 1;
		assert_int_equal(back[i], inside ? i : 0);
	}

	/* Whole rows are one contiguous run. */
	{
		const int64_t ws[] = { 1, 0 }, wl[] = { 3, 3 };
		dvar_slice rows = slice_of(2, ws, wl);
		memset(back, 0, sizeof back);
		assert_int_equal(dvar_slice_copy(DVAR_INT32, &rows, src, &all, back, &all), DVAR_OK);
		for (int i = 0; i < 12; i++)
			assert_int_equal(back[i], i >= 3 ? i : 0);
	}

	/* A scalar. */
	{
		float a = 2.5f, b = 0.0f;
		dvar_slice s0 = slice_of(0, rs, rl);
		assert_int_equal(dvar_slice_copy(DVAR_FLOAT32, &s0, &a, &s0, &b, &s0), DVAR_OK);
		assert_true(b == 2.5f);
	}
}

static void test_core_slices__copy_errors(void **state)
{
	const int64_t s1[] = { 1 }, l3[] = { 3 }, s0[] = { 0 }, l5[] = { 5 }, l2[] = { 2 };
	const int64_t l0[] = { 0 }, s2[] = { 2 }, neg[] = { -1 };
	const int64_t z2[] = { 0, 0 }, o2[] = { 1, 1 };
	dvar_slice src = slice_of(1, s1, l3), dst = slice_of(1, s0, l5), region;
	char a[16] = { 0 }, b[16] = { 0 };

	(void)state;
	region = slice_of(1, s0, l2); /* [0,2) starts before src [1,4) */
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, a, &src, b, &dst), DVAR_ESHAPE);
	tu_assert_error_contains("slice copy: region 0,2 is not inside the source slice 1,3");
	region = slice_of(1, s2, l3); /* [2,5) ends after src */
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, a, &src, b, &dst), DVAR_ESHAPE);
	tu_assert_error_contains("region 2,3 is not inside the source slice 1,3");
	region = slice_of(1, s1, l2);
	dst = slice_of(1, s2, l5);
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, a, &src, b, &dst), DVAR_ESHAPE);
	tu_assert_error_contains("slice copy: region 1,2 is not inside the destination slice 2,5");

	dst = slice_of(2, z2, o2);
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, a, &src, b, &dst), DVAR_ESHAPE);
	tu_assert_error_contains("destination slice of rank 2");

	dst = slice_of(1, s0, l5);
	assert_int_equal(dvar_slice_copy(77, &region, a, &src, b, &dst), DVAR_EINVAL);
	tu_assert_error_contains("unknown dtype 77");

	region = slice_of(1, neg, l2);
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, a, &src, b, &dst), DVAR_EINVAL);
	tu_assert_error_contains("region -1,2 has a negative start or length");

	/* An empty region inside both copies nothing and needs no buffers. */
	region = slice_of(1, s2, l0);
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, NULL, &src, NULL, &dst), DVAR_OK);
	region = slice_of(1, s1, l2);
	assert_int_equal(dvar_slice_copy(DVAR_INT8, &region, NULL, &src, b, &dst), DVAR_EINVAL);
	tu_assert_error_contains("NULL buffer");
}

/* The obvious copy: every element of region, one at a time. */
static void reference_copy(size_t esize, const dvar_slice *r, const unsigned char *src,
                           const dvar_slice *ss, unsigned char *dst, const dvar_slice *ds)
{
	uint64_t n = 1;
	for (int32_t d = 0; d < r->rank; d++)
		n *= (uint64_t)r->length[d];
	for (uint64_t e = 0; e < n; e++) {
		uint64_t rest = e, so = 0, dof = 0, sm = 1, dm = 1;
		for (int32_t d = r->rank - 1; d >= 0; d--) {
			int64_t i = r->start[d] + (int64_t)(rest % (uint64_t)r->length[d]);
			rest /= (uint64_t)r->length[d];
			so += (uint64_t)(i - ss->start[d]) * sm;
			dof += (uint64_t)(i - ds->start[d]) * dm;
			sm *= (uint64_t)ss->length[d];
			dm *= (uint64_t)ds->length[d];
		}
		memcpy(dst + dof * esize, src + so * esize, esize);
	}
}

/* A slice of full holding region: per dimension exactly region, the whole
 * dimension, or something in between, so that runs collapse sometimes. */
static dvar_slice random_cover(uint64_t *rng, const dvar_slice *region, const dvar_shape *full)
{
	dvar_slice s = *region;
	for (int32_t d = 0; d < region->rank; d++) {
		int64_t lo = region->start[d], hi = region->start[d] + region->length[d];
		switch (tu_rand(rng) % 3) {
		case 0:
			break;
		case 1:
			lo = 0;
			hi = full->dims[d];
			break;
		default:
			lo -= (int64_t)(tu_rand(rng) % (uint64_t)(lo + 1));
			hi += (int64_t)(tu_rand(rng) % (uint64_t)(full->dims[d] - hi + 1));
		}
		s.start[d] = lo;
		s.length[d] = hi - lo;
	}
	return s;
}

static uint64_t count_of(const dvar_slice *s)
{
	uint64_t n = 1;
	for (int32_t d = 0; d < s->rank; d++)
		n *= (uint64_t)s->length[d];
	return n;
}

static void test_core_slices__copy_random(void **state)
{
	static const int dtypes[] = { DVAR_UINT8, DVAR_BOOL, DVAR_FLOAT16, DVAR_INT16,
	                              DVAR_FLOAT32, DVAR_INT32, DVAR_FLOAT64, DVAR_INT64 };
	/* Largest dimension per rank, so buffers stay a few thousand elements. */
	static const int64_t max_dim[DVAR_MAX_RANK + 1] = { 0, 300, 40, 14, 7, 5, 4, 3, 3 };
	uint64_t rng = 20240611;
	int cases = 0, zero_cases = 0;

	(void)state;
	for (int iter = 0; iter < 720; iter++) {
		int32_t rank = iter % (DVAR_MAX_RANK + 1);
		int dtype = dtypes[(iter / (DVAR_MAX_RANK + 1)) % 8];
		size_t esize = dvar_dtype_size(dtype);
		int64_t dims[DVAR_MAX_RANK];
		dvar_shape full;
		dvar_slice region, ss, ds;
		unsigned char *src, *dst, *want;
		size_t sbytes, dbytes;
		uint64_t nreg;

		for (int32_t d = 0; d < rank; d++) {
			/* one dimension in 16 is zero-sized */
			dims[d] = tu_rand(&rng) % 16 == 0 ? 0 : 1 + (int64_t)(tu_rand(&rng) % (uint64_t)max_dim[rank]);
		}
		full = shape_of(rank, dims);
		memset(&region, 0, sizeof region);
		region.rank = rank;
		for (int32_t d = 0; d < rank; d++) {
			int64_t a = (int64_t)(tu_rand(&rng) % (uint64_t)(dims[d] + 1));
			int64_t b = (int64_t)(tu_rand(&rng) % (uint64_t)(dims[d] + 1));
			if (tu_rand(&rng) % 4 == 0) {
				a = 0;
				b = dims[d];
			}
			region.start[d] = a < b ? a : b;
			region.length[d] = a < b ? b - a : a - b;
		}
		assert_int_equal(dvar_slice_check(&region, &full), DVAR_OK);
		ss = random_cover(&rng, &region, &full);
		ds = random_cover(&rng, &region, &full);
		assert_int_equal(dvar_slice_check(&ss, &full), DVAR_OK);
		assert_int_equal(dvar_slice_check(&ds, &full), DVAR_OK);

		sbytes = count_of(&ss) * esize;
		dbytes = count_of(&ds) * esize;
		/* 16 guard bytes after dst catch writes past the end */
		src = malloc(sbytes + 1);
		dst = malloc(dbytes + 16);
		want = malloc(dbytes + 16);
		assert_non_null(src);
		assert_non_null(dst);
		assert_non_null(want);
		tu_fill_random(src, sbytes, tu_rand(&rng));
		tu_fill_random(dst, dbytes + 16, tu_rand(&rng));
		memcpy(want, dst, dbytes + 16);

		reference_copy(esize, &region, src, &ss, want, &ds);
		if (dvar_slice_copy(dtype, &region, src, &ss, dst, &ds) != DVAR_OK)
			fail_msg("case %d: %s", iter, dvar_error_last()->message);
		if (memcmp(dst, want, dbytes + 16) != 0) {
			char r[400], s[400], t[400], f[200];
			dvar_slice_format(&region, NULL, r, sizeof r);
			dvar_slice_format(&ss, NULL, s, sizeof s);
			dvar_slice_format(&ds, NULL, t, sizeof t);
			dvar_shape_format(&full, f, sizeof f);
			fail_msg("case %d: esize %zu full %s region %s src %s dst %s differs", iter,
			         esize, f, r, s, t);
		}
		assert_int_equal(dvar_slice_num_elements(&region, &nreg), DVAR_OK);
		zero_cases += nreg == 0;
		cases++;
		free(src);
		free(dst);
		free(want);
	}
	assert_int_equal(cases, 720);
	/* the generator does reach the zero-size paths */
	assert_true(zero_cases > 20);
}

/* Scattering full's rows into two halves and gathering them back restores it. */
static void test_core_slices__copy_roundtrip_shards(void **state)
{
	const int64_t dims[] = { 7, 5, 3 };
	const int64_t s0[] = { 0, 0, 0 }, l0[] = { 7, 2, 3 };
	const int64_t s1[] = { 0, 2, 0 }, l1[] = { 7, 3, 3 };
	dvar_shape full = shape_of(3, dims);
	dvar_slice all, a = slice_of(3, s0, l0), b = slice_of(3, s1, l1);
	double orig[105], back[105], pa[42], pb[63];

	(void)state;
	dvar_slice_full(&all, &full);
	for (int i = 0; i < 105; i++)
		orig[i] = i * 0.5;
	assert_int_equal(dvar_slice_copy(DVAR_FLOAT64, &a, orig, &all, pa, &a), DVAR_OK);
	assert_int_equal(dvar_slice_copy(DVAR_FLOAT64, &b, orig, &all, pb, &b), DVAR_OK);
	/* element (i, j, k) of shard a is orig[(i*5 + j)*3 + k] */
	assert_true(pa[0] == orig[0]);
	assert_true(pa[1 * 6 + 1 * 3 + 2] == orig[(1 * 5 + 1) * 3 + 2]);
	assert_true(pb[2 * 9 + 0 * 3 + 1] == orig[(2 * 5 + 2) * 3 + 1]);
	memset(back, 0, sizeof back);
	assert_int_equal(dvar_slice_copy(DVAR_FLOAT64, &a, pa, &a, back, &all), DVAR_OK);
	assert_int_equal(dvar_slice_copy(DVAR_FLOAT64, &b, pb, &b, back, &all), DVAR_OK);
	assert_memory_equal(back, orig, sizeof orig);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_slices__full_and_shape),
		cmocka_unit_test(test_core_slices__check_errors),
		cmocka_unit_test(test_core_slices__parse_format),
		cmocka_unit_test(test_core_slices__scalar),
		cmocka_unit_test(test_core_slices__parse_errors),
		cmocka_unit_test(test_core_slices__parse_numpy),
		cmocka_unit_test(test_core_slices__format_truncates),
		cmocka_unit_test(test_core_slices__intersect),
		cmocka_unit_test(test_core_slices__num_elements),
		cmocka_unit_test(test_core_slices__copy_example),
		cmocka_unit_test(test_core_slices__copy_errors),
		cmocka_unit_test(test_core_slices__copy_random),
		cmocka_unit_test(test_core_slices__copy_roundtrip_shards),
	};
	return cmocka_run_group_tests_name("core/slices", tests, NULL, NULL);
}
