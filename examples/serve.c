/*
 * examples/serve.c - dvar-serve: answer click-model queries (model.h) from a
 * checkpoint exported with `dvar export --single-shard`. The embedding table
 * is mapped in place, never copied: a query reads only its ids' rows, so
 * memory stays a few pages whatever the vocabulary. Each prediction line is
 * model_print_prediction's, the line dvar-train --predict prints, so the two
 * can be compared byte for byte.
 *
 * main owns the three mappings (they outlive the reader, which is freed as
 * soon as they are made) and the row buffers, and releases them on every
 * path out.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dvar/dvar.h>

#include "model.h"

enum { EXIT_USAGE = 2 };

static const char usage_text[] =
	"usage: dvar-serve [options] EXPORT [QUERIES]\n"
	"\n"
	"Answer click-model queries from an exported checkpoint, with the embedding\n"
	"table mapped in place (only the rows a query names are read).\n"
	"\n"
	"  EXPORT     a checkpoint written by `dvar export --single-shard`, or a root\n"
	"             with a `checkpoint` file (then its latest checkpoint)\n"
	"  QUERIES    a file of queries, one per line; `-` or none: standard input.\n"
	"             A query is 1..64 ids, then optionally ';' and 8 features\n"
	"             (\"12 7 40000 ; 0.5 -1 0 0 0 0 0 2\"). Blank and # lines are skipped.\n"
	"\n"
	"Options:\n"
	"  --rows     after each prediction, print each id's row: \"  row ID: v0 v1 ...\"\n"
	"  --json     one JSON object per query: {\"ids\":[..],\"p\":..,\"logit\":..}\n"
	"             (with --rows, also \"rows\":[[..],..]); non-finite numbers are null\n"
	"  --verify   check every checksum of the variables before serving\n"
	"  -h, --help     show this text\n"
	"  --version      show the version of dvar-serve and libdvar\n"
	"\n"
	"Each prediction is \"ids=A,B,.. p=P logit=Z\", as dvar-train --predict prints it.\n"
	"Exit status: 0 success, 1 an error (the export, a variable or a query line),\n"
	"2 usage error. Predictions printed before a bad query line stay printed.\n";

static void fail(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout); /* keep stdout's lines before the error when both go to one place */
	fputs("dvar-serve: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("dvar-serve: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\nSee 'dvar-serve --help'.\n", stderr);
	return EXIT_USAGE;
}

/* The last dvar error, or the code's name when the library left no message. */
static const char *dvar_message(int rc)
{
	const dvar_error *e = dvar_error_last();

	return e->message[0] ? e->message : dvar_strerror(rc);
}

/* The served model: the three variables, mapped. */
typedef struct {
	dvar_mapping emb, kernel, bias;
	int64_t vocab, dim;
} served;

/* Find float32 variable name in the export and check its shape against want. */
static int find_var(dvar_reader *r, const char *name, const dvar_shape *want, const char *rule,
                    size_t *i, dvar_var_info *v)
{
	char have[160], need[160];
	int rc = dvar_reader_find(r, name, i);

	if (rc == DVAR_ENOTFOUND) {
		fail("%s: no variable '%s' (is it a dvar-train export?)", dvar_reader_path(r), name);
		return -1;
	}
	if (rc != DVAR_OK || (rc = dvar_reader_var(r, *i, v)) != DVAR_OK) {
		fail("%s: %s: %s", dvar_reader_path(r), name, dvar_message(rc));
		return -1;
	}
	if (v->dtype != DVAR_FLOAT32) {
		fail("%s: %s is %s, expected float32", dvar_reader_path(r), name,
		     dvar_dtype_name(v->dtype));
		return -1;
	}
	if (want && !dvar_shape_equal(&v->shape, want)) {
		dvar_shape_format(&v->shape, have, sizeof have);
		dvar_shape_format(want, need, sizeof need);
		if (rule)
			fail("%s: %s has shape %s, expected %s = %s", dvar_reader_path(r), name, have,
			     rule, need);
		else
			fail("%s: %s has shape %s, expected %s", dvar_reader_path(r), name, have, need);
		return -1;
	}
	return 0;
}

static int map_var(dvar_reader *r, size_t i, const char *name, uint32_t flags, dvar_mapping *m)
{
	int rc = dvar_reader_map(r, i, DVAR_MAP_WHOLE, flags, m);

	/* The library's message already says how to fix an unmappable variable. */
	if (rc != DVAR_OK)
		fail("%s: cannot map %s: %s", dvar_reader_path(r), name, dvar_message(rc));
	return rc == DVAR_OK ? 0 : -1;
}

/* Open the export, check the three variables, map them and let the reader go. */
static int load(served *s, const char *path, int verify)
{
	dvar_reader *r;
	dvar_var_info ve, vk, vb;
	dvar_shape kshape, bshape;
	size_t ie, ik, ib;
	uint32_t flags = verify ? DVAR_MAP_VERIFY : 0;
	int rc = dvar_reader_open(&r, path, NULL);

	if (rc != DVAR_OK) {
		fail("cannot open export %s: %s", path, dvar_message(rc));
		return -1;
	}
	if (find_var(r, MODEL_EMBEDDING, NULL, NULL, &ie, &ve) != 0)
		goto fail;
	if (ve.shape.rank != 2) {
		char got[160];
		dvar_shape_format(&ve.shape, got, sizeof got);
		fail("%s: %s has shape %s, expected [vocab, dim]", dvar_reader_path(r),
		     MODEL_EMBEDDING, got);
		goto fail;
	}
	s->vocab = ve.shape.dims[0];
	s->dim = ve.shape.dims[1];
	/* Every lookup gathers up to MODEL_MAX_QUERY_IDS rows; keep that buffer sane. */
	if (s->dim > (INT64_C(1) << 24)) {
		fail("%s: %s rows of %lld floats are too wide to serve", dvar_reader_path(r),
		     MODEL_EMBEDDING, (long long)s->dim);
		goto fail;
	}
	dvar_shape_init(&kshape, 2, (int64_t[]){ s->dim + MODEL_FEATURES, 1 });
	dvar_shape_init(&bshape, 1, (int64_t[]){ 1 });
	if (find_var(r, MODEL_KERNEL, &kshape, "[dim + 8, 1]", &ik, &vk) != 0 ||
	    find_var(r, MODEL_BIAS, &bshape, NULL, &ib, &vb) != 0)
		goto fail;
	if (map_var(r, ie, MODEL_EMBEDDING, flags, &s->emb) != 0 ||
	    map_var(r, ik, MODEL_KERNEL, flags, &s->kernel) != 0 ||
	    map_var(r, ib, MODEL_BIAS, flags, &s->bias) != 0)
		goto fail;
	if (isatty(STDERR_FILENO))
		fprintf(stderr, "dvar-serve: mapped %s %lld x %lld (%llu bytes%s) from %s\n",
		        MODEL_EMBEDDING, (long long)s->vocab, (long long)s->dim,
		        (unsigned long long)s->emb.size, verify ? ", verified" : "",
		        dvar_reader_path(r));
	dvar_reader_free(r);
	return 0;
fail:
	dvar_reader_free(r);
	return -1;
}

static void print_number(double v)
{
	if (isfinite(v))
		printf("%.9g", v);
	else
		fputs("null", stdout); /* JSON has no NaN or infinity */
}

static void print_json(const model_query *q, float logit, const float *rows, int64_t dim,
                       int with_rows)
{
	fputs("{\"ids\":[", stdout);
	for (int k = 0; k < q->nids; k++)
		printf("%s%lld", k ? "," : "", (long long)q->ids[k]);
	fputs("],\"p\":", stdout);
	print_number(model_sigmoid(logit));
	fputs(",\"logit\":", stdout);
	print_number(logit);
	if (with_rows) {
		fputs(",\"rows\":[", stdout);
		for (int k = 0; k < q->nids; k++) {
			fputs(k ? ",[" : "[", stdout);
			for (int64_t c = 0; c < dim; c++) {
				if (c)
					putchar(',');
				print_number(rows[k * dim + c]);
			}
			putchar(']');
		}
		putchar(']');
	}
	fputs("}\n", stdout);
}

static void print_rows(const model_query *q, const float *rows, int64_t dim)
{
	for (int k = 0; k < q->nids; k++) {
		printf("  row %lld:", (long long)q->ids[k]);
		for (int64_t c = 0; c < dim; c++)
			printf(" %.9g", (double)rows[k * dim + c]);
		putchar('\n');
	}
}

/* Answer every query of in; 0, or -1 at the first bad line (reported). */
static int serve(const served *s, FILE *in, const char *name, int json, int with_rows)
{
	const float *emb = s->emb.data, *kernel = s->kernel.data;
	size_t row_bytes = (size_t)s->dim * sizeof(float);
	float bias, *rows, *pooled;
	char *line = NULL, err[128];
	size_t cap = 0;
	long lineno = 0;
	int rc = 0;

	memcpy(&bias, s->bias.data, sizeof bias);
	rows = malloc(MODEL_MAX_QUERY_IDS * row_bytes + 1);
	pooled = malloc(row_bytes + 1);
	if (!rows || !pooled) {
		fail("out of memory");
		rc = -1;
		goto done;
	}
	while (getline(&line, &cap, in) >= 0) {
		model_query q;
		float logit;
		int parsed = model_parse_query(line, &q, err, sizeof err);

		lineno++;
		if (parsed == 0)
			continue;
		if (parsed < 0) {
			fail("%s:%ld: %s", name, lineno, err);
			rc = -1;
			goto done;
		}
		/* Gather the rows from the mapping: only these pages are read. */
		for (int k = 0; k < q.nids; k++) {
			if (q.ids[k] >= s->vocab) {
				fail("%s:%ld: id %lld is out of range (vocab %lld)", name, lineno,
				     (long long)q.ids[k], (long long)s->vocab);
				rc = -1;
				goto done;
			}
			if (row_bytes) /* dim 0: nothing mapped (data is NULL) */
				memcpy(rows + (size_t)k * (size_t)s->dim, emb + q.ids[k] * s->dim,
				       row_bytes);
		}
		logit = model_logit(rows, q.nids, s->dim, q.has_features ? q.features : NULL, kernel,
		                    bias, pooled);
		if (json) {
			print_json(&q, logit, rows, s->dim, with_rows);
		} else {
			model_print_prediction(stdout, &q, logit);
			if (with_rows)
				print_rows(&q, rows, s->dim);
		}
	}
	if (ferror(in)) {
		fail("%s: read error: %s", name, strerror(errno));
		rc = -1;
	}
done:
	free(line);
	free(rows);
	free(pooled);
	return rc;
}

int main(int argc, char **argv)
{
	const char *export_path = NULL, *queries = NULL;
	int json = 0, with_rows = 0, verify = 0, only_args = 0, rc = 1;
	served s;
	FILE *in = stdin;

	memset(&s, 0, sizeof s);
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a];

		if (!only_args && strcmp(arg, "--") == 0) {
			only_args = 1;
		} else if (!only_args && arg[0] == '-' && arg[1] != '\0') {
			if (strcmp(arg, "--rows") == 0) {
				with_rows = 1;
			} else if (strcmp(arg, "--json") == 0) {
				json = 1;
			} else if (strcmp(arg, "--verify") == 0) {
				verify = 1;
			} else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
				fputs(usage_text, stdout);
				return 0;
			} else if (strcmp(arg, "--version") == 0) {
				printf("dvar-serve %s (libdvar %s)\n", DVAR_VERSION_STRING, dvar_version());
				return 0;
			} else {
				return usage_error("unknown option '%s'", arg);
			}
		} else if (!export_path) {
			export_path = arg;
		} else if (!queries) {
			queries = arg;
		} else {
			return usage_error("unexpected argument '%s'", arg);
		}
	}
	if (!export_path)
		return usage_error("%s", "missing EXPORT");
	if (queries && strcmp(queries, "-") != 0 && !(in = fopen(queries, "r"))) {
		fail("cannot open queries %s: %s", queries, strerror(errno));
		return 1;
	}
	if (load(&s, export_path, verify) == 0 &&
	    serve(&s, in, in == stdin ? "<stdin>" : queries, json, with_rows) == 0)
		rc = 0;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fail("writing the predictions: %s", strerror(errno));
		rc = 1;
	}
	if (in != stdin)
		fclose(in);
	dvar_reader_unmap(&s.emb);
	dvar_reader_unmap(&s.kernel);
	dvar_reader_unmap(&s.bias);
	return rc;
}
