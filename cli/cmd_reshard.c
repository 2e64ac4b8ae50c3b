/*
 * cli/cmd_reshard.c - `dvar reshard IN OUT`: a new checkpoint in which the
 * chosen variables are written as M shards in the div layout (one slice per
 * shard, attributes kind=sharded, shards=M, layout=div; M = 1 gives a plain
 * entry: no shards or layout, kind=plain where it was kind=sharded) and every other variable is kept as it was (same slices, dtype and
 * attributes). Each target shard is read from whatever slices were saved
 * (dvar_reader_read with the shard's rows, in bounded pieces) and streamed
 * into the writer, so memory stays at a few chunks whatever the sizes. The
 * writer commits OUT atomically: a failure leaves nothing there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *in_path;
static const char *out_path;
static int64_t shards = -1;
static cli_args var_opts;
static const char *partitioner_text;
static const char *compress = "auto";
static uint64_t chunk_size;
static int progress = -1;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "IN", NULL, &in_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint to read (a directory, or a root: its latest), or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint directory to create; it must not exist" },
	{ CLI_OPT_INT, "shards", "M", &shards, 0, 0,
	  "write every sharded variable (saved as several slices, or with\n"
	  "kind=sharded) as M shards" },
	{ CLI_OPT_LIST, "var", "NAME=M", &var_opts, 0, 0,
	  "write variable NAME (any variable) as M shards; M = 1 makes it\n"
	  "one plain entry. Repeatable; overrides --shards and --partitioner" },
	{ CLI_OPT_STRING, "partitioner", "SPEC", &partitioner_text, 0, 0,
	  "shard every sharded variable as TensorFlow's partitioner would:\n"
	  "fixed:M, min-size:BYTES[:MAX_SHARDS] or max-size:BYTES[:MAX_SHARDS]\n"
	  "(BYTES may end in K, M or G)" },
	{ CLI_OPT_STRING, "compress", "MODE", &compress, 0, 0,
	  "chunks of OUT: auto (default), lz4 or none (as in dvar import)" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "raw bytes per chunk of OUT: a multiple of 4K from 4K to 1G\n(default 4M)" },
	CLI_PROGRESS_OPTS(&progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Give --shards or --partitioner (not both), --var, or both kinds. Shards\n"
	"follow TensorFlow's div rule along the first axis: M = min(M, rows), the\n"
	"first rows % M shards one row longer; a variable with fewer rows than M\n"
	"gets one shard per row, a scalar one shard. A resharded variable keeps its\n"
	"other attributes; with one shard it loses shards and layout, and\n"
	"kind=sharded becomes kind=plain (as dvar_save writes one shard).\n"
	"Every other variable is copied as it was saved. Memory stays at a few\n"
	"chunks whatever the variable sizes. Nothing is left at OUT when the\n"
	"reshard fails (an unknown --var, a corrupt IN, ...).\n"
	"From a TensorFlow checkpoint: OUT is a dvar checkpoint; a partitioned\n"
	"variable (saved as slices) counts as sharded. String tensors (the object\n"
	"graph, vocabularies) are left out, with a note naming each; a dtype dvar\n"
	"has no type for is an error.",
	NULL
};

/* One --var NAME=M, split. */
typedef struct {
	const char *name;
	int64_t shards;
	int used;
} var_rule;

static dvar_compress mode;
static dvar_partitioner part;

/* "NAME=M" with M a whole number >= 1. */
static int parse_var_rule(const char *cmd, char *text, var_rule *out)
{
	char *eq = strrchr(text, '='), *end;

	if (!eq || eq == text || eq[1] == '\0')
		return cli_usage_error(cmd, "--var '%s' is not NAME=M", text);
	errno = 0;
	long long m = strtoll(eq + 1, &end, 10);
	if (errno || *end || eq[1] < '0' || eq[1] > '9')
		return cli_usage_error(cmd, "--var '%s': M must be a whole number", text);
	if (m < 1)
		return cli_usage_error(cmd, "--var '%s': M must be at least 1", text);
	*eq = '\0';
	out->name = text;
	out->shards = m;
	out->used = 0;
	return 0;
}

static int check_options(var_rule *rules)
{
	int rc;

	if ((rc = cli_parse_compress("reshard", compress, &mode)) != 0 ||
	    (rc = cli_check_chunk_size("reshard", chunk_size)) != 0)
		return rc;
	if (shards >= 0 && partitioner_text)
		return cli_usage_error("reshard", "--shards and --partitioner both say how to shard "
		                                  "every sharded variable: give one of them");
	if (shards == 0)
		return cli_usage_error("reshard", "--shards must be at least 1");
	if (shards < 0 && !partitioner_text && var_opts.n == 0)
		return cli_usage_error("reshard", "nothing to do: give --shards, --partitioner or --var");
	if (partitioner_text && dvar_partitioner_parse(&part, partitioner_text) != DVAR_OK)
		return cli_usage_error("reshard", "--partitioner: %s", cli_dvar_message());
	for (int k = 0; k < var_opts.n; k++) {
		if ((rc = parse_var_rule("reshard", var_opts.v[k], &rules[k])) != 0)
			return rc;
		for (int j = 0; j < k; j++)
			if (strcmp(rules[j].name, rules[k].name) == 0)
				return cli_usage_error("reshard", "--var gives variable '%s' twice",
				                       rules[k].name);
	}
	return 0;
}

/*
 * What happens to variable i: *want = the shard count asked for (0: keep
 * it as it was saved).
 */
static int plan_var(dvar_reader *r, size_t i, const dvar_var_info *v, var_rule *rules,
                    int64_t *want)
{
	*want = 0;
	for (int k = 0; k < var_opts.n; k++) {
		if (strcmp(rules[k].name, v->name) == 0) {
			rules[k].used = 1;
			*want = rules[k].shards;
			if (v->dtype == DVAR_DTYPE_STRING)
				return cli_error("reshard", "--var: '%s' is a string tensor, which a dvar "
				                            "checkpoint cannot hold", v->name);
			break;
		}
	}
	if (v->dtype == DVAR_DTYPE_STRING)
		return CLI_EXIT_OK;
	if (!cli_dtype_numeric(v->dtype))
		return cli_error_dtype("reshard", v->name, v->dtype);
	if (*want)
		return CLI_EXIT_OK;
	if (!cli_var_is_sharded(r, i))
		return CLI_EXIT_OK;
	if (shards > 0) {
		*want = shards;
	} else if (partitioner_text) {
		if (dvar_partitioner_apply(&part, &v->shape, v->dtype, want) != DVAR_OK)
			return cli_error("reshard", "variable '%s': %s", v->name, cli_dvar_message());
		if (*want < 1)
			*want = 1;
	}
	return CLI_EXIT_OK;
}

/* Write variable i: as want div shards, or (want = 0) slice by slice as it was
 * saved. ctx is the shard counts of every variable. A cli_var_fn. */
static int copy_var(void *ctx, cli_copier *c, dvar_reader *r, size_t i, const dvar_var_info *v,
                    dvar_writer *w)
{
	int64_t want = ((const int64_t *)ctx)[i];
	dvar_slice sl;
	int64_t *offsets = NULL, n = 0;
	int rc = CLI_EXIT_OK;

	if (v->dtype == DVAR_DTYPE_STRING) {
		fprintf(stderr, "dvar reshard: note: leaving out '%s', a string tensor (a dvar "
		                "checkpoint holds numeric tensors only)\n", v->name);
		return CLI_EXIT_OK;
	}
	if (want == 0) {
		if (v->num_slices == 0)
			return CLI_EXIT_OK; /* nothing saved, nothing to declare */
		for (size_t j = 0; rc == CLI_EXIT_OK && j < v->num_slices; j++) {
			if (dvar_reader_var_slice(r, i, j, &sl) != DVAR_OK)
				return cli_error_dvar("reshard");
			rc = cli_copy_region(c, r, i, v, w, &sl);
		}
	} else {
		if ((rc = cli_layout("reshard", v->name, &v->shape, want, &offsets, &n)) != CLI_EXIT_OK)
			return rc;
		if (n < want && v->shape.rank == 0)
			fprintf(stderr, "dvar reshard: note: variable '%s' is a scalar: 1 shard, not %lld\n",
			        v->name, (long long)want);
		else if (n < want)
			fprintf(stderr, "dvar reshard: note: variable '%s' has %lld row%s: %lld shard%s, "
			                "not %lld\n", v->name, (long long)v->shape.dims[0],
			        v->shape.dims[0] == 1 ? "" : "s", (long long)n, n == 1 ? "" : "s",
			        (long long)want);
		for (int64_t k = 0; rc == CLI_EXIT_OK && k < n; k++) {
			cli_shard_slice(&v->shape, offsets, k, &sl);
			rc = cli_copy_region(c, r, i, v, w, &sl);
		}
		free(offsets);
	}
	if (rc == CLI_EXIT_OK && cli_copy_attrs(r, i, w, v->name, want ? n : 0) != DVAR_OK)
		rc = cli_error_dvar("reshard");
	return rc;
}

static int reshard(dvar_reader *r, var_rule *rules)
{
	size_t nv = dvar_reader_num_vars(r);
	int64_t *want = calloc(nv ? nv : 1, sizeof(int64_t));
	dvar_var_info v;
	uint64_t total = 0;
	int rc = CLI_EXIT_OK;

	if (!want)
		return cli_error("reshard", "out of memory");
	for (size_t i = 0; rc == CLI_EXIT_OK && i < nv; i++) {
		if (dvar_reader_var(r, i, &v) != DVAR_OK)
			rc = cli_error_dvar("reshard");
		else
			rc = plan_var(r, i, &v, rules, &want[i]);
		/* Resharded: the whole variable; kept: the slices saved; strings: nothing. */
		if (rc != CLI_EXIT_OK || v.dtype == DVAR_DTYPE_STRING)
			continue;
		total += want[i] ? 0 : v.raw_bytes;
		if (want[i]) {
			uint64_t bytes = 0;
			dvar_shape_num_bytes(&v.shape, v.dtype, &bytes);
			total += bytes;
		}
	}
	for (int k = 0; rc == CLI_EXIT_OK && k < var_opts.n; k++)
		if (!rules[k].used)
			rc = cli_error("reshard", "--var: variable '%s' not found in checkpoint '%s'",
			               rules[k].name, dvar_reader_path(r));
	if (rc == CLI_EXIT_OK)
		rc = cli_rewrite("reshard", r, out_path, chunk_size, mode, progress, total, copy_var,
		                 want);
	free(want);
	return rc;
}

int cmd_reshard(int argc, char **argv)
{
	dvar_reader *r = NULL;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	var_rule *rules = calloc((size_t)var_opts.n + 1, sizeof(var_rule));
	if (!rules)
		return cli_error("reshard", "out of memory");
	if ((rc = check_options(rules)) != 0 ||
	    (rc = cli_open_in_out("reshard", in_path, out_path, "directory", &r)) != CLI_EXIT_OK)
		goto done;
	rc = reshard(r, rules);
done:
	dvar_reader_free(r);
	free(rules);
	return rc;
}
