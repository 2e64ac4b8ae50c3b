/*
 * fuzz/fuzz_specs.c - the texts users type: slice specs (TensorFlow's and
 * NumPy's, against a shape the input picks), partitioner specs and
 * subscripts. A parsed slice lies inside its shape and formats back to a
 * spec that parses to the same slice; a partitioner formats to a text that
 * parses to the same partitioner.
 */
#include "fuzz.h"

static void slice(const char *text, const uint8_t *shape_bytes)
{
	dvar_shape shape = { .rank = shape_bytes[0] % 5 };
	dvar_slice s, s2;
	char buf[512];

	for (int d = 0; d < shape.rank; d++)
		shape.dims[d] = shape_bytes[1 + d] % 17;
	if (dvar_slice_parse_any(&s, text, &shape) != DVAR_OK)
		return;
	FUZZ_CHECK(dvar_slice_check(&s, &shape) == DVAR_OK);
	dvar_slice_format(&s, &shape, buf, sizeof buf);
	FUZZ_CHECK(dvar_slice_parse(&s2, buf, &shape) == DVAR_OK);
	FUZZ_CHECK(s2.rank == s.rank);
	for (int d = 0; d < s.rank; d++)
		FUZZ_CHECK(s2.start[d] == s.start[d] && s2.length[d] == s.length[d]);
}

static void partitioner(const char *text)
{
	dvar_partitioner p, p2;
	char a[256], b[256];
	if (dvar_partitioner_parse(&p, text) != DVAR_OK)
		return;
	FUZZ_CHECK(dvar_partitioner_check(&p) == DVAR_OK);
	dvar_partitioner_format(&p, a, sizeof a);
	FUZZ_CHECK(dvar_partitioner_parse(&p2, a) == DVAR_OK);
	dvar_partitioner_format(&p2, b, sizeof b);
	FUZZ_CHECK(strcmp(a, b) == 0);
}

static void subscript(const char *text)
{
	dvar_subscript items[16];
	int n = -1;
	if (dvar_subscript_parse(text, items, 16, &n) != DVAR_OK)
		return;
	FUZZ_CHECK(n >= 0 && n <= 16);
	int ellipses = 0;
	for (int k = 0; k < n; k++)
		ellipses += items[k].kind == DVAR_SUBSCRIPT_ELLIPSIS;
	FUZZ_CHECK(ellipses <= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text;
	if (size < 6)
		return 0;
	if (!(text = malloc(size - 6 + 1)))
		return 0;
	memcpy(text, data + 6, size - 6);
	text[size - 6] = '\0';
	switch (data[0] % 3) {
	case 0: slice(text, data + 1); break;
	case 1: partitioner(text); break;
	default: subscript(text); break;
	}
	free(text);
	dvar_error_clear();
	return 0;
}
