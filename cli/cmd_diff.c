/*
 * cli/cmd_diff.c - `dvar diff`: compare two checkpoints. Variables only in
 * one, dtype or shape mismatches, then the values of the rest, read in
 * bounded pieces from both sides at once, and their attributes. Elements
 * are equal as numpy's array_equal(equal_nan=True) has them (-0.0 == 0.0,
 * NaN == NaN); --bitwise wants their bytes equal, --atol/--rtol accept
 * |a - b| <= atol + rtol * |b|. TensorFlow string tensors are read whole and
 * compared element by element, byte for byte. With --short-names variables
 * are matched (and shown) by their TF2 short names.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* What the comparison found, for the summary. */
typedef struct {
	size_t only_a, only_b, mismatched, values, attrs, common, excluded;
	uint64_t elements;
} tally;

/* Buffers for one piece of each side, raw and as doubles. */
typedef struct {
	void *a, *b;
	double *da, *db;
} buffers;

/* Where a variable's values first differ: a flat index and both elements
 * (a string tensor's malloc'ed, the others' bytes in a and b). */
typedef struct {
	int found;
	uint64_t at;
	unsigned char a[16], b[16];
	char *sa, *sb;
	uint64_t la, lb;
} first_diff;

/* What comparing a variable's values found. */
typedef struct {
	uint64_t ndiff;
	double max_abs;
	first_diff first;
} value_diff;

static int is_float(int dtype)
{
	return dtype == DVAR_FLOAT32 || dtype == DVAR_FLOAT64 || dtype == DVAR_FLOAT16 ||
	       dtype == DVAR_BFLOAT16;
}

/* Elements x of A and y of B that differ in their bytes: equal or not. */
static int elements_equal(int dtype, double x, double y)
{
	if (bitwise)
		return 0;
	if (isnan(x) && isnan(y))
		return 1;
	if (atol_given >= 0 || rtol_given >= 0) {
		double atol = atol_given < 0 ? 0 : atol_given, rtol = rtol_given < 0 ? 0 : rtol_given;
		/* A NaN against a number is a difference whatever the tolerance. */
		return fabs(x - y) <= atol + rtol * fabs(y);
	}
	/* Bytes tell integers apart exactly; doubles would round above 2^53. */
	return is_float(dtype) && x == y;
}

/* Compare one piece of n elements, the base-th on of the variable. */
static void compare_piece(int dtype, const buffers *buf, uint64_t n, uint64_t base,
                          value_diff *vd)
{
	size_t esize = dvar_dtype_size(dtype);
	const unsigned char *a = buf->a, *b = buf->b;

	if (memcmp(a, b, n * esize) == 0)
		return;
	dvar_dtype_to_f64(buf->da, dtype, a, n);
	dvar_dtype_to_f64(buf->db, dtype, b, n);
	for (uint64_t k = 0; k < n; k++) {
		if (memcmp(a + k * esize, b + k * esize, esize) == 0)
			continue;
		double x = buf->da[k], y = buf->db[k], d = fabs(x - y);
		if (!isnan(d) && d > vd->max_abs)
			vd->max_abs = d;
		if (elements_equal(dtype, x, y))
			continue;
		if (!vd->first.found) {
			vd->first.found = 1;
			vd->first.at = base + k;
			memcpy(vd->first.a, a + k * esize, esize);
			memcpy(vd->first.b, b + k * esize, esize);
		}
		vd->ndiff++;
	}
}

/* Compare variable ia of A with ib of B, which agree on dtype and shape. */
static int compare_values(dvar_reader *ra, size_t ia, dvar_reader *rb, size_t ib,
                          const dvar_var_info *v, cli_progress *pr, uint64_t *done,
                          uint64_t total, value_diff *vd)
{
	size_t esize = dvar_dtype_size(v->dtype);
	uint64_t budget = cli_walk_budget(2 * esize + 2 * sizeof(double)), n, all, base = 0;
	dvar_slice full, piece;
	buffers buf;
	dvar_slice_walk w;
	int rc = CLI_EXIT_OK;

	dvar_slice_full(&full, &v->shape);
	dvar_slice_num_elements(&full, &all);
	size_t cap = (size_t)(all < budget ? all : budget) + 1;
	buf.a = malloc(cap * esize);
	buf.b = malloc(cap * esize);
	buf.da = malloc(cap * sizeof(double));
	buf.db = malloc(cap * sizeof(double));
	if (!buf.a || !buf.b || !buf.da || !buf.db) {
		rc = cli_error("diff", "out of memory");
		goto done;
	}
	/* The pieces come in row-major order: base is the first one's flat index. */
	dvar_slice_walk_init(&w, &full, budget);
	while (dvar_slice_walk_next(&w, &piece, &n)) {
		if (dvar_reader_read(ra, ia, &piece, buf.a, n * esize) != DVAR_OK ||
		    dvar_reader_read(rb, ib, &piece, buf.b, n * esize) != DVAR_OK) {
			rc = cli_error_dvar("diff");
			break;
		}
		compare_piece(v->dtype, &buf, n, base, vd);
		base += n;
		*done += 2 * n * esize;
		cli_progress_update(pr, *done, total);
	}
done:
	free(buf.a);
	free(buf.b);
	free(buf.da);
	free(buf.db);
	return rc;
}

/* Compare string tensors ia of A and ib of B (same shape), element by element. */
static int compare_strings(dvar_reader *ra, size_t ia, dvar_reader *rb, size_t ib,
                           const dvar_var_info *v, value_diff *vd)
{
	uint64_t n, ta, tb, *la = NULL, *lb = NULL;
	char *ba = NULL, *bb = NULL;
	int rc;

	dvar_shape_num_elements(&v->shape, &n);
	if ((rc = cli_read_strings("diff", ra, ia, n, &la, &ba, &ta)) == CLI_EXIT_OK &&
	    (rc = cli_read_strings("diff", rb, ib, n, &lb, &bb, &tb)) == CLI_EXIT_OK) {
		for (uint64_t k = 0, oa = 0, ob = 0; k < n; oa += la[k], ob += lb[k], k++) {
			if (la[k] == lb[k] && memcmp(ba + oa, bb + ob, (size_t)la[k]) == 0)
				continue;
			if (!vd->first.found) {
				vd->first = (first_diff){ .found = 1, .at = k, .la = la[k], .lb = lb[k] };
				vd->first.sa = malloc(la[k] + 1);
				vd->first.sb = malloc(lb[k] + 1);
				if (!vd->first.sa || !vd->first.sb) {
					rc = cli_error("diff", "out of memory");
					break;
				}
				memcpy(vd->first.sa, ba + oa, (size_t)la[k]);
				memcpy(vd->first.sb, bb + ob, (size_t)lb[k]);
			}
			vd->ndiff++;
		}
	}
	free(la);
	free(lb);
	free(ba);
	free(bb);
	return rc;
}

/*
 * The names variables are matched by: their names, or with --short-names
 * their short names (malloc'ed, every one); order sorts them.
 */
typedef struct {
	dvar_reader *r;
	size_t n;
	char **key;
	size_t *order;      /* the variables not left out, by key */
	size_t live;        /* how many: order's length */
	unsigned char *out; /* out[i]: variable i is left out (--exclude, --skip-tf-bookkeeping) */
} names;

static const names *sorting;

static int by_key(const void *x, const void *y)
{
	return strcmp(sorting->key[*(const size_t *)x], sorting->key[*(const size_t *)y]);
}

static void names_free(names *nm)
{
	/* The keys are dvar_short_name's with --short-names, strdup's otherwise. */
	for (size_t i = 0; nm->key && i < nm->n; i++) {
		if (short_names)
			dvar_free(nm->key[i]);
		else
			free(nm->key[i]);
	}
	free(nm->key);
	free(nm->order);
	free(nm->out);
}

static int starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* 1 when variable v, matched by key, is left out of the comparison. */
static int left_out(const dvar_var_info *v, const char *key)
{
	for (int k = 0; k < excludes.n; k++) {
		if (starts_with(v->name, excludes.v[k]) || starts_with(key, excludes.v[k]))
			return 1;
	}
	/* What TensorFlow saves beside the variables: no conversion carries it all. */
	return skip_tf && (strcmp(v->name, "_CHECKPOINTABLE_OBJECT_GRAPH") == 0 ||
	                   strcmp(v->name, "save_counter") == 0 ||
	                   starts_with(v->name, "save_counter/") ||
	                   v->dtype == DVAR_DTYPE_STRING);
}

static int names_init(names *nm, dvar_reader *r, const char *label)
{
	dvar_var_info v;

	nm->r = r;
	nm->n = dvar_reader_num_vars(r);
	nm->key = calloc(nm->n + 1, sizeof(char *));
	nm->order = calloc(nm->n + 1, sizeof(size_t));
	nm->out = calloc(nm->n + 1, 1);
	if (!nm->key || !nm->order || !nm->out)
		return cli_error("diff", "out of memory");
	for (size_t i = 0; i < nm->n; i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			return cli_error_dvar("diff");
		nm->key[i] = short_names ? dvar_short_name(v.name) : strdup(v.name);
		if (!nm->key[i])
			return cli_error("diff", "out of memory");
		nm->out[i] = left_out(&v, nm->key[i]);
		if (!nm->out[i])
			nm->order[nm->live++] = i;
	}
	sorting = nm;
	qsort(nm->order, nm->live, sizeof(size_t), by_key);
	for (size_t k = 1; k < nm->live; k++) {
		const char *a = nm->key[nm->order[k - 1]], *b = nm->key[nm->order[k]];
		if (strcmp(a, b) == 0) {
			dvar_var_info va, vb;
			dvar_reader_var(r, nm->order[k - 1], &va);
			dvar_reader_var(r, nm->order[k], &vb);
			return cli_error("diff", "--short-names: '%s' is the short name of both '%s' and "
			                         "'%s' in %s; compare without --short-names",
			                 a, va.name, vb.name, label);
		}
	}
	return CLI_EXIT_OK;
}

/* The variable of nm matched by key; SIZE_MAX when none. */
static size_t names_find(const names *nm, const char *key)
{
	size_t lo = 0, hi = nm->live;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(nm->key[nm->order[mid]], key);
		if (c == 0)
			return nm->order[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

/* Variables of `from` that `other` lacks; other_index[i] is SIZE_MAX for them. */
static int list_missing(cli_json *j, const char *key, const char *label, const names *from,
                        const names *other, size_t *other_index, size_t *count)
{
	if (j)
		cli_json_array(j, key);
	for (size_t i = 0; i < from->n; i++) {
		size_t at = from->out[i] ? SIZE_MAX : names_find(other, from->key[i]);
		if (other_index)
			other_index[i] = at;
		if (from->out[i] || at != SIZE_MAX)
			continue;
		(*count)++;
		if (j)
			cli_json_str(j, NULL, from->key[i]);
		else
			printf("only in %s: %s\n", label, from->key[i]);
	}
	if (j)
		cli_json_end(j);
	return CLI_EXIT_OK;
}

/* How one variable common to both compares. */
typedef enum { SAME, VALUES_DIFFER, DTYPE_DIFFERS, SHAPE_DIFFERS } status;

static const char *const status_names[] = {
	"equal", "values_differ", "dtype_differs", "shape_differs"
};

typedef struct {
	status st;
	uint64_t num_elements;
	value_diff vd;
	size_t nattrs; /* attribute keys that differ */
} outcome;

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
static void report_first(cli_json *j, const dvar_var_info *v, const first_diff *f)
{
	char at[DVAR_MAX_RANK * 21 + 3], ta[64], tb[64];

	if (!f->found)
		return;
	format_index(at, sizeof(at), &v->shape, f->at);
	if (v->dtype != DVAR_DTYPE_STRING) {
		cli_format_elem(ta, sizeof(ta), v->dtype, f->a);
		cli_format_elem(tb, sizeof(tb), v->dtype, f->b);
	}
	if (j) {
		int64_t idx[DVAR_MAX_RANK];
		unravel(&v->shape, f->at, idx);
		cli_json_object(j, "first_difference");
		cli_json_dims(j, "index", idx, v->shape.rank);
		if (v->dtype == DVAR_DTYPE_STRING) {
			cli_json_bytes(j, "a", f->sa, f->la);
			cli_json_bytes(j, "b", f->sb, f->lb);
		} else {
			cli_json_str(j, "a", ta);
			cli_json_str(j, "b", tb);
		}
		cli_json_end(j);
		return;
	}
	printf("    first difference at %s: ", at);
	if (v->dtype == DVAR_DTYPE_STRING) {
		print_string_elem(f->sa, f->la);
		printf(" vs ");
		print_string_elem(f->sb, f->lb);
		printf("\n");
	} else {
		printf("%s vs %s\n", ta, tb);
	}
}

/* A kind that only says how the variable is stored: none, plain or sharded. */
static int layout_kind(const char *kind)
{
	return !kind || strcmp(kind, DVAR_KIND_PLAIN) == 0 || strcmp(kind, DVAR_KIND_SHARDED) == 0;
}

/*
 * Walk the attributes of variable ia of A and ib of B (each in key order)
 * together; the keys whose values differ are reported (when report is set)
 * and counted.
 */
static size_t compare_attrs(const dvar_reader *ra, size_t ia, const dvar_reader *rb, size_t ib,
                            const char *name, cli_json *j, int report)
{
	size_t na = dvar_reader_var_num_attrs(ra, ia), nb = dvar_reader_var_num_attrs(rb, ib);
	size_t ka = 0, kb = 0, count = 0;

	/* A side without attributes (a TensorFlow checkpoint, a plain import) says nothing. */
	if (na == 0 || nb == 0)
		return 0;

	while (ka < na || kb < nb) {
		const char *key_a = NULL, *val_a = NULL, *key_b = NULL, *val_b = NULL;
		if (ka < na)
			dvar_reader_var_attr_at(ra, ia, ka, &key_a, &val_a);
		if (kb < nb)
			dvar_reader_var_attr_at(rb, ib, kb, &key_b, &val_b);
		int c = !key_a ? 1 : !key_b ? -1 : strcmp(key_a, key_b);
		const char *key = c <= 0 ? key_a : key_b;
		const char *x = c <= 0 ? val_a : NULL, *y = c >= 0 ? val_b : NULL;
		ka += c <= 0;
		kb += c >= 0;
		if (x && y && strcmp(x, y) == 0)
			continue;
		/* How rows are laid out over shards is storage, which reshard and export change. */
		if (strcmp(key, DVAR_SHARDING_ATTR_SHARDS) == 0 ||
		    strcmp(key, DVAR_SHARDING_ATTR_LAYOUT) == 0 ||
		    (strcmp(key, DVAR_STORE_ATTR_KIND) == 0 && layout_kind(x) && layout_kind(y)))
			continue;
		count++;
		if (!report)
			continue;
		if (j) {
			cli_json_object(j, NULL);
			cli_json_str(j, "key", key);
			cli_json_str(j, "a", x);
			cli_json_str(j, "b", y);
			cli_json_end(j);
		} else {
			printf("attribute differs: %s: %s: %s vs %s\n", name, key, x ? x : "(none)",
			       y ? y : "(none)");
		}
	}
	return count;
}

static void report_variable(cli_json *j, const char *name, const dvar_reader *ra, size_t ia,
                            const dvar_reader *rb, size_t ib, const dvar_var_info *va,
                            const dvar_var_info *vb, const outcome *o)
{
	char sa[200], sb[200], mx[40], da[CLI_DTYPE_TEXT_MAX], db[CLI_DTYPE_TEXT_MAX];
	int compared = o->st == SAME || o->st == VALUES_DIFFER;
	int strings = va->dtype == DVAR_DTYPE_STRING;

	cli_dtype_text(va->dtype, da, sizeof(da));
	cli_dtype_text(vb->dtype, db, sizeof(db));
	if (j) {
		cli_json_object(j, NULL);
		cli_json_str(j, "name", name);
		cli_json_str(j, "status", status_names[o->st]);
		cli_json_str(j, "dtype_a", da);
		cli_json_str(j, "dtype_b", db);
		cli_json_dims(j, "shape_a", va->shape.dims, va->shape.rank);
		cli_json_dims(j, "shape_b", vb->shape.dims, vb->shape.rank);
		if (compared) {
			cli_json_u64(j, "num_elements", o->num_elements);
			cli_json_u64(j, "num_different", o->vd.ndiff);
			if (!strings)
				cli_json_real(j, "max_abs_diff", o->vd.max_abs);
			report_first(j, va, &o->vd.first);
		}
		if (o->nattrs) {
			cli_json_array(j, "attributes_differ");
			compare_attrs(ra, ia, rb, ib, name, j, 1);
			cli_json_end(j);
		}
		cli_json_end(j);
		return;
	}
	dvar_shape_format(&va->shape, sa, sizeof(sa));
	dvar_shape_format(&vb->shape, sb, sizeof(sb));
	cli_format_real(mx, sizeof(mx), o->vd.max_abs, 0);
	switch (o->st) {
	case DTYPE_DIFFERS:
		printf("dtype differs: %s: %s vs %s\n", name, da, db);
		break;
	case SHAPE_DIFFERS:
		printf("shape differs: %s: %s vs %s\n", name, sa, sb);
		break;
	case VALUES_DIFFER:
		if (strings)
			printf("values differ: %s: %llu of %llu strings\n", name,
			       (unsigned long long)o->vd.ndiff, (unsigned long long)o->num_elements);
		else
			printf("values differ: %s: %llu of %llu elements, max abs diff %s\n", name,
			       (unsigned long long)o->vd.ndiff, (unsigned long long)o->num_elements, mx);
		report_first(NULL, va, &o->vd.first);
		break;
	case SAME:
		break;
	}
	if (o->nattrs)
		compare_attrs(ra, ia, rb, ib, name, NULL, 1);
}

/* Classify, and compare values when dtype and shape agree. */
static int compare_variable(dvar_reader *ra, size_t ia, dvar_reader *rb, size_t ib,
                            const dvar_var_info *va, const dvar_var_info *vb, cli_progress *pr,
                            uint64_t *done, uint64_t total, outcome *o)
{
	memset(o, 0, sizeof(*o));
	if (va->dtype != vb->dtype) {
		o->st = DTYPE_DIFFERS;
		return CLI_EXIT_OK;
	}
	if (!dvar_shape_equal(&va->shape, &vb->shape)) {
		o->st = SHAPE_DIFFERS;
		return CLI_EXIT_OK;
	}
	dvar_shape_num_elements(&va->shape, &o->num_elements);
	int rc;
	if (va->dtype == DVAR_DTYPE_STRING) {
		rc = compare_strings(ra, ia, rb, ib, va, &o->vd);
		*done += va->raw_bytes + vb->raw_bytes;
		cli_progress_update(pr, *done, total);
	} else if (!cli_dtype_numeric(va->dtype)) {
		rc = cli_error_dtype("diff", va->name, va->dtype);
	} else {
		rc = compare_values(ra, ia, rb, ib, va, pr, done, total, &o->vd);
	}
	o->st = o->vd.ndiff ? VALUES_DIFFER : SAME;
	return rc;
}

/* Bytes both sides will read: what the progress line counts. */
static uint64_t bytes_to_compare(dvar_reader *ra, dvar_reader *rb, const size_t *in_b)
{
	dvar_var_info va, vb;
	uint64_t total = 0, n;

	for (size_t i = 0; i < dvar_reader_num_vars(ra); i++) {
		if (in_b[i] == SIZE_MAX || dvar_reader_var(ra, i, &va) != DVAR_OK ||
		    dvar_reader_var(rb, in_b[i], &vb) != DVAR_OK)
			continue;
		if (va.dtype != vb.dtype || !dvar_shape_equal(&va.shape, &vb.shape))
			continue;
		if (va.dtype == DVAR_DTYPE_STRING)
			total += va.raw_bytes + vb.raw_bytes;
		else if (cli_dtype_numeric(va.dtype) &&
		         dvar_shape_num_bytes(&va.shape, va.dtype, &n) == DVAR_OK)
			total += 2 * n;
	}
	return total;
}

static int diff_readers(const names *na, const names *nb, size_t *in_b, cli_json *j, tally *t)
{
	dvar_reader *ra = na->r, *rb = nb->r;
	dvar_var_info va, vb;
	uint64_t done = 0;
	cli_progress pr;
	outcome o;
	int rc;

	if ((rc = list_missing(j, "only_in_a", "A", na, nb, in_b, &t->only_a)) != CLI_EXIT_OK ||
	    (rc = list_missing(j, "only_in_b", "B", nb, na, NULL, &t->only_b)) != CLI_EXIT_OK)
		return rc;
	uint64_t total = bytes_to_compare(ra, rb, in_b);
	cli_progress_init(&pr, "diff", progress, json);
	if (j)
		cli_json_array(j, "variables");
	for (size_t i = 0; i < dvar_reader_num_vars(ra) && rc == CLI_EXIT_OK; i++) {
		if (in_b[i] == SIZE_MAX)
			continue;
		if (dvar_reader_var(ra, i, &va) != DVAR_OK || dvar_reader_var(rb, in_b[i], &vb) != DVAR_OK) {
			rc = cli_error_dvar("diff");
			break;
		}
		rc = compare_variable(ra, i, rb, in_b[i], &va, &vb, &pr, &done, total, &o);
		if (rc == CLI_EXIT_OK) {
			if (attrs)
				o.nattrs = compare_attrs(ra, i, rb, in_b[i], NULL, NULL, 0);
			t->common++;
			t->elements += o.num_elements;
			t->mismatched += o.st == DTYPE_DIFFERS || o.st == SHAPE_DIFFERS;
			t->values += o.st == VALUES_DIFFER;
			t->attrs += o.nattrs != 0;
			report_variable(j, na->key[i], ra, i, rb, in_b[i], &va, &vb, &o);
		}
		free(o.vd.first.sa);
		free(o.vd.first.sb);
	}
	cli_progress_end(&pr);
	if (j)
		cli_json_end(j);
	return rc;
}

int cmd_diff(int argc, char **argv)
{
	dvar_reader *ra = NULL, *rb = NULL;
	names na = { 0 }, nb = { 0 };
	size_t *in_b = NULL;
	tally t = { 0 };
	cli_json j;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	if (bitwise && (atol_given >= 0 || rtol_given >= 0))
		return cli_usage_error("diff", "--bitwise wants equal bytes: it cannot go with a "
		                               "tolerance (--atol, --rtol)");
	if (dvar_reader_open(&ra, path_a, NULL) != DVAR_OK ||
	    dvar_reader_open(&rb, path_b, NULL) != DVAR_OK) {
		rc = cli_error_dvar("diff");
		goto done;
	}
	in_b = malloc((dvar_reader_num_vars(ra) + 1) * sizeof(*in_b));
	if (!in_b) {
		rc = cli_error("diff", "out of memory");
		goto done;
	}
	if ((rc = names_init(&na, ra, "A")) != CLI_EXIT_OK ||
	    (rc = names_init(&nb, rb, "B")) != CLI_EXIT_OK)
		goto done;
	t.excluded = (na.n - na.live) + (nb.n - nb.live);
	if (json) {
		cli_json_begin(&j, stdout);
		cli_json_str(&j, "a", dvar_reader_path(ra));
		cli_json_str(&j, "b", dvar_reader_path(rb));
		if (atol_given >= 0)
			cli_json_real(&j, "atol", atol_given);
		else
			cli_json_str(&j, "atol", NULL);
		if (rtol_given >= 0)
			cli_json_real(&j, "rtol", rtol_given);
		else
			cli_json_str(&j, "rtol", NULL);
		cli_json_bool(&j, "bitwise", bitwise);
		cli_json_u64(&j, "excluded", t.excluded);
	}
	rc = diff_readers(&na, &nb, in_b, json ? &j : NULL, &t);
	int identical = !t.only_a && !t.only_b && !t.mismatched && !t.values && !t.attrs;
	char also[80] = "", left[64] = "";
	if (t.attrs)
		snprintf(also, sizeof(also), ", %zu with other attributes", t.attrs);
	if (t.excluded)
		snprintf(left, sizeof(left), "; %zu left out", t.excluded);
	if (json) {
		/* After an error these are dropped: reporting it ended the document. */
		cli_json_bool(&j, "identical", rc == CLI_EXIT_OK && identical);
		cli_json_end(&j);
	} else if (rc == CLI_EXIT_OK && identical) {
		printf("identical: %zu variable%s, %llu element%s%s\n", t.common,
		       t.common == 1 ? "" : "s", (unsigned long long)t.elements,
		       t.elements == 1 ? "" : "s", left);
	} else if (rc == CLI_EXIT_OK) {
		printf("different: %zu only in A, %zu only in B, %zu with another dtype or shape, "
		       "%zu with other values%s (of %zu in both%s)\n",
		       t.only_a, t.only_b, t.mismatched, t.values, also, t.common, left);
	}
	if (rc == CLI_EXIT_OK)
		rc = identical ? CLI_EXIT_OK : CLI_EXIT_CHECK;
done:
	names_free(&na);
	names_free(&nb);
	free(in_b);
	dvar_reader_free(ra);
	dvar_reader_free(rb);
	return rc;
}
