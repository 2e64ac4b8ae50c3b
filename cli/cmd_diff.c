/*
 * cli/cmd_diff.c - `dvar diff`: compare two checkpoints with dvar_diff and
 * print its report: variables only in one, dtype or shape mismatches,
 * values and attributes that differ, and a summary line (or one JSON
 * document). After a failed read, what was compared before it is printed,
 * then the error.
 */
#include <stdint.h>

#include "cli.h"


static const char *path_a;
static const char *path_b;
static int json;
static double atol_given = -1;
static double rtol_given = -1;
static int bitwise;
static int attrs = 1;
static int skip_tf;
static cli_args excludes;
static int short_names;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "A", NULL, &path_a, 0, CLI_OPT_REQUIRED,
	  "a checkpoint directory, a root with a `checkpoint` file, or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "B", NULL, &path_b, 0, CLI_OPT_REQUIRED, "the checkpoint to compare A with" },
	{ CLI_OPT_REAL, "atol", "X", &atol_given, 0, 0,
	  "elements equal when |a - b| <= X + rtol * |b| (default 0)" },
	{ CLI_OPT_REAL, "rtol", "X", &rtol_given, 0, 0,
	  "elements equal when |a - b| <= atol + X * |b| (default 0)" },
	{ CLI_OPT_SWITCH, "bitwise", NULL, &bitwise, 1, 0,
	  "elements equal only when their bytes are: -0.0 differs from 0.0,\n"
	  "and a NaN from a NaN with other bits" },
	{ CLI_OPT_LIST, "exclude", "PREFIX", &excludes, 0, 0,
	  "leave out the variables whose name begins with PREFIX, on both\n"
	  "sides (repeatable)" },
	{ CLI_OPT_SWITCH, "skip-tf-bookkeeping", NULL, &skip_tf, 1, 0,
	  "leave out what TensorFlow keeps beside the variables, on both\n"
	  "sides: _CHECKPOINTABLE_OBJECT_GRAPH, save_counter/..., and every\n"
	  "string tensor; to check a TF checkpoint against its conversion" },
	{ CLI_OPT_SWITCH, "attrs", NULL, &attrs, 1, 0,
	  "compare the variables' attributes too (the default)" },
	{ CLI_OPT_SWITCH, "no-attrs", NULL, &attrs, 0, 0,
	  "compare dtypes, shapes and values only" },
	{ CLI_OPT_SWITCH, "json", NULL, &json, 1, 0, "print one JSON document on stdout" },
	{ CLI_OPT_SWITCH, "short-names", NULL, &short_names, 1, 0,
	  "match and show variables by their TF2 short names (see 'dvar help\n"
	  "inspect'): a TensorFlow checkpoint's x/.ATTRIBUTES/VARIABLE_VALUE\n"
	  "then compares with a dvar checkpoint's x" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Elements compare as numpy.array_equal(a, b, equal_nan=True): -0.0 equals\n"
	"0.0 and any NaN equals any NaN; integers compare exactly. --bitwise wants\n"
	"equal bytes instead, and cannot go with --atol/--rtol, which compare\n"
	"as doubles (integers above 2^53 may round) as numpy.isclose does,\n"
	"with B the reference, and still let NaN equal NaN. String tensors\n"
	"(TensorFlow's) compare element by element, byte for byte (the tolerances\n"
	"do not apply); their JSON entries have no max_abs_diff. A variable whose\n"
	"values differ shows its first differing element: its index and both\n"
	"values, as 'dvar cat' prints them.\n"
	"Attributes (see 'dvar inspect') are compared unless --no-attrs: a line\n"
	"\"attribute differs: NAME: KEY: A vs B\" per key, \"(none)\" for a key one\n"
	"side lacks; they count as differences. Left out: a variable without any\n"
	"(TensorFlow's, a plain import), and the layout a reshard or export\n"
	"changes (shards, layout, kind plain vs sharded).\n"
	"The summary line counts variables with other attributes, and those left\n"
	"out, only when there are some.\n"
	"--json prints {\"schema_version\":1,\"a\",\"b\",\"atol\",\"rtol\" (null when not given),\n"
	"\"bitwise\",\"excluded\" (how many variables were left out),\"only_in_a\":[...],\n"
	"\"only_in_b\":[...],\"variables\":[{\"name\",\"status\" (\"equal\", \"values_differ\",\n"
	"\"dtype_differs\" or \"shape_differs\"),\"dtype_a\",\"dtype_b\",\"shape_a\",\"shape_b\",\n"
	"\"num_elements\",\"num_different\",\"max_abs_diff\",\"first_difference\":{\"index\",\"a\",\"b\"}\n"
	"(values as text, when values differ),\"attributes_differ\":[{\"key\",\"a\",\"b\"}]\n"
	"(null for a missing key; only when some differ)}],\"identical\"}; max_abs_diff is\n"
	"null when infinite. After a failed read the document ends with \"ok\":false,\n"
	"\"error\" (below).",
	"the checkpoints differ"
};

/* What the report holds, for the summary. */
typedef struct {
	size_t mismatched, values, attrs;
	uint64_t elements;
} tally;

/* The JSON names of the dvar_diff_status values, in their order. */
static const char *const status_names[] = {
	"equal", "values_differ", "dtype_differs", "shape_differs"
};

/* Where a string element's text is cut off: past it, "..." stands for the rest. */
#define STRING_SHOWN 64

/* The index of the at-th element (row-major) of a tensor of shape, which has some. */
static void unravel(const dvar_shape *shape, uint64_t at, int64_t *idx)
{
	for (int d = shape->rank - 1; d >= 0; d--) {
		idx[d] = (int64_t)(at % (uint64_t)shape->dims[d]);
		at /= (uint64_t)shape->dims[d];
	}
}

/* "[5,7]", as cat's string lines show an index. */
static void format_index(char *buf, size_t cap, const dvar_shape *shape, uint64_t at)
{
	int64_t idx[DVAR_MAX_RANK];
	size_t len = 0;

	unravel(shape, at, idx);
	len += (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < shape->rank && len < cap; d++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%lld", d ? "," : "", (long long)idx[d]);
	if (len < cap)
		snprintf(buf + len, cap - len, "]");
}

static void print_string_elem(const char *p, uint64_t n)
{
	cli_print_cstring(stdout, p, n < STRING_SHOWN ? n : STRING_SHOWN);
	if (n > STRING_SHOWN)
		printf("...");
}

/* The first differing element, as a line of text or a JSON object. */
static void report_first(cli_json *j, const dvar_var_diff *v)
{
	char at[DVAR_MAX_RANK * 21 + 3], ta[64], tb[64];
	int strings = v->dtype_a == DVAR_DTYPE_STRING;

	if (!v->has_first)
		return;
	format_index(at, sizeof(at), &v->shape_a, v->first_index);
	if (!strings) {
		cli_format_elem(ta, sizeof(ta), v->dtype_a, v->first_a);
		cli_format_elem(tb, sizeof(tb), v->dtype_b, v->first_b);
	}
	if (j) {
		int64_t idx[DVAR_MAX_RANK];
		unravel(&v->shape_a, v->first_index, idx);
		cli_json_object(j, "first_difference");
		cli_json_dims(j, "index", idx, v->shape_a.rank);
		if (strings) {
			cli_json_bytes(j, "a", v->first_a, v->first_a_len);
			cli_json_bytes(j, "b", v->first_b, v->first_b_len);
		} else {
			cli_json_str(j, "a", ta);
			cli_json_str(j, "b", tb);
		}
		cli_json_end(j);
		return;
	}
	printf("    first difference at %s: ", at);
	if (strings) {
		print_string_elem(v->first_a, v->first_a_len);
		printf(" vs ");
		print_string_elem(v->first_b, v->first_b_len);
		printf("\n");
	} else {
		printf("%s vs %s\n", ta, tb);
	}
}

/* The attributes that differ on variable i, as lines or JSON objects. */
static void report_attrs(cli_json *j, const dvar_diff_report *rep, size_t i,
                         const dvar_var_diff *v)
{
	const char *key, *x, *y;

	for (size_t k = 0; k < v->num_attrs; k++) {
		if (dvar_diff_report_attr_at(rep, i, k, &key, &x, &y) != DVAR_OK)
			continue;
		if (j) {
			cli_json_object(j, NULL);
			cli_json_str(j, "key", key);
			cli_json_str(j, "a", x);
			cli_json_str(j, "b", y);
			cli_json_end(j);
		} else {
			printf("attribute differs: %s: %s: %s vs %s\n", v->name, key, x ? x : "(none)",
			       y ? y : "(none)");
		}
	}
}

static void report_variable(cli_json *j, const dvar_diff_report *rep, size_t i,
                            const dvar_var_diff *v)
{
	char sa[200], sb[200], mx[40], da[CLI_DTYPE_TEXT_MAX], db[CLI_DTYPE_TEXT_MAX];
	int compared = v->status == DVAR_DIFF_EQUAL || v->status == DVAR_DIFF_VALUES_DIFFER;
	int strings = v->dtype_a == DVAR_DTYPE_STRING;

	cli_dtype_text(v->dtype_a, da, sizeof(da));
	cli_dtype_text(v->dtype_b, db, sizeof(db));
	if (j) {
		cli_json_object(j, NULL);
		cli_json_str(j, "name", v->name);
		cli_json_str(j, "status", status_names[v->status]);
		cli_json_str(j, "dtype_a", da);
		cli_json_str(j, "dtype_b", db);
		cli_json_dims(j, "shape_a", v->shape_a.dims, v->shape_a.rank);
		cli_json_dims(j, "shape_b", v->shape_b.dims, v->shape_b.rank);
		if (compared) {
			cli_json_u64(j, "num_elements", v->num_elements);
			cli_json_u64(j, "num_different", v->num_different);
			if (!strings)
				cli_json_real(j, "max_abs_diff", v->max_abs_diff);
			report_first(j, v);
		}
		if (v->num_attrs) {
			cli_json_array(j, "attributes_differ");
			report_attrs(j, rep, i, v);
			cli_json_end(j);
		}
		cli_json_end(j);
		return;
	}
	dvar_shape_format(&v->shape_a, sa, sizeof(sa));
	dvar_shape_format(&v->shape_b, sb, sizeof(sb));
	cli_format_real(mx, sizeof(mx), v->max_abs_diff, 0);
	switch (v->status) {
	case DVAR_DIFF_DTYPE_DIFFERS:
		printf("dtype differs: %s: %s vs %s\n", v->name, da, db);
		break;
	case DVAR_DIFF_SHAPE_DIFFERS:
		printf("shape differs: %s: %s vs %s\n", v->name, sa, sb);
		break;
	case DVAR_DIFF_VALUES_DIFFER:
		if (strings)
			printf("values differ: %s: %llu of %llu strings\n", v->name,
			       (unsigned long long)v->num_different, (unsigned long long)v->num_elements);
		else
			printf("values differ: %s: %llu of %llu elements, max abs diff %s\n", v->name,
			       (unsigned long long)v->num_different, (unsigned long long)v->num_elements,
			       mx);
		report_first(NULL, v);
		break;
	case DVAR_DIFF_EQUAL:
		break;
	}
	report_attrs(NULL, rep, i, v);
}

/* The variables only one side holds: "only in A: NAME" lines, or a JSON array. */
static void report_only(cli_json *j, const dvar_diff_report *rep, dvar_diff_side side)
{
	if (j)
		cli_json_array(j, side == DVAR_DIFF_A ? "only_in_a" : "only_in_b");
	for (size_t k = 0; k < dvar_diff_report_num_only_in(rep, side); k++) {
		if (j)
			cli_json_str(j, NULL, dvar_diff_report_only_in(rep, side, k));
		else
			printf("only in %s: %s\n", side == DVAR_DIFF_A ? "A" : "B",
			       dvar_diff_report_only_in(rep, side, k));
	}
	if (j)
		cli_json_end(j);
}

/* Every variable of the report, counted into t. */
static void report_variables(cli_json *j, const dvar_diff_report *rep, tally *t)
{
	dvar_var_diff v;

	if (j)
		cli_json_array(j, "variables");
	for (size_t i = 0; i < dvar_diff_report_num_vars(rep); i++) {
		if (dvar_diff_report_var(rep, i, &v) != DVAR_OK)
			continue;
		t->elements += v.num_elements;
		t->mismatched += v.status == DVAR_DIFF_DTYPE_DIFFERS ||
		                 v.status == DVAR_DIFF_SHAPE_DIFFERS;
		t->values += v.status == DVAR_DIFF_VALUES_DIFFER;
		t->attrs += v.num_attrs != 0;
		report_variable(j, rep, i, &v);
	}
}

int cmd_diff(int argc, char **argv)
{
	dvar_diff_options o = DVAR_DIFF_OPTIONS_INIT;
	dvar_diff_report *rep = NULL;
	cli_progress pr;
	tally t = { 0 };
	cli_json j;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (bitwise && (atol_given >= 0 || rtol_given >= 0))
		return cli_usage_error("diff", "--bitwise wants equal bytes: it cannot go with a "
		                               "tolerance (--atol, --rtol)");
	o.atol = atol_given;
	o.rtol = rtol_given;
	o.flags = (bitwise ? DVAR_DIFF_BITWISE : 0) | (skip_tf ? DVAR_DIFF_SKIP_TF_BOOKKEEPING : 0) |
	          (attrs ? 0 : DVAR_DIFF_NO_ATTRS) | (short_names ? DVAR_DIFF_SHORT_NAMES : 0);
	o.exclude_prefixes = (const char *const *)excludes.v;
	o.num_exclude_prefixes = (size_t)excludes.n;
	o.piece_bytes = cli_walk_budget(1); /* the budget in bytes: one-byte elements */
	cli_progress_init(&pr, "diff", progress, json);
	o.cb.progress = cli_progress_update;
	o.cb.progress_userdata = &pr;
	int status = dvar_diff(&rep, path_a, path_b, &o);
	cli_progress_end(&pr);
	if (!rep)
		return cli_error_dvar("diff");
	size_t excluded = dvar_diff_report_num_excluded(rep), common = dvar_diff_report_num_vars(rep);
	if (json) {
		cli_json_begin(&j, stdout);
		cli_json_str(&j, "a", dvar_diff_report_path(rep, DVAR_DIFF_A));
		cli_json_str(&j, "b", dvar_diff_report_path(rep, DVAR_DIFF_B));
		if (atol_given >= 0)
			cli_json_real(&j, "atol", atol_given);
		else
			cli_json_str(&j, "atol", NULL);
		if (rtol_given >= 0)
			cli_json_real(&j, "rtol", rtol_given);
		else
			cli_json_str(&j, "rtol", NULL);
		cli_json_bool(&j, "bitwise", bitwise);
		cli_json_u64(&j, "excluded", excluded);
	}
	report_only(json ? &j : NULL, rep, DVAR_DIFF_A);
	report_only(json ? &j : NULL, rep, DVAR_DIFF_B);
	report_variables(json ? &j : NULL, rep, &t);
	/* In --json mode this ends the document: what follows is dropped. */
	rc = status == DVAR_OK ? CLI_EXIT_OK : cli_error_dvar("diff");
	if (json)
		cli_json_end(&j);
	int identical = dvar_diff_report_identical(rep);
	size_t only_a = dvar_diff_report_num_only_in(rep, DVAR_DIFF_A);
	size_t only_b = dvar_diff_report_num_only_in(rep, DVAR_DIFF_B);
	char also[80] = "", left[64] = "";
	if (t.attrs)
		snprintf(also, sizeof(also), ", %zu with other attributes", t.attrs);
	if (excluded)
		snprintf(left, sizeof(left), "; %zu left out", excluded);
	if (json) {
		cli_json_bool(&j, "identical", rc == CLI_EXIT_OK && identical);
		cli_json_end(&j);
	} else if (rc == CLI_EXIT_OK && identical) {
		printf("identical: %zu variable%s, %llu element%s%s\n", common, common == 1 ? "" : "s",
		       (unsigned long long)t.elements, t.elements == 1 ? "" : "s", left);
	} else if (rc == CLI_EXIT_OK) {
		printf("different: %zu only in A, %zu only in B, %zu with another dtype or shape, "
		       "%zu with other values%s (of %zu in both%s)\n",
		       only_a, only_b, t.mismatched, t.values, also, common, left);
	}
	if (rc == CLI_EXIT_OK)
		rc = identical ? CLI_EXIT_OK : CLI_EXIT_CHECK;
	dvar_diff_report_free(rep);
	return rc;
}
