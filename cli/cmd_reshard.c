/*
 * cli/cmd_reshard.c - `dvar reshard IN OUT`: dvar_reshard with the
 * command's options. The library writes OUT atomically: a failure leaves
 * nothing there.
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
static int quiet;
static int force;

static const cli_opt opts[] = {
	{ CLI_OPT_ARG, "IN", NULL, &in_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint to read (a directory, or a root: its latest), or a\n"
	  "TensorFlow checkpoint (its prefix, or a directory naming it)" },
	{ CLI_OPT_ARG, "OUT", NULL, &out_path, 0, CLI_OPT_REQUIRED,
	  "the checkpoint directory to create; it must not exist (see --force)" },
	{ CLI_OPT_INT, "shards", "M", &shards, 0, 0,
	  "write every sharded variable (saved as several slices, or with\n"
	  "kind=sharded) as M shards" },
	{ CLI_OPT_LIST, "var", "NAME=M", &var_opts, 0, 0,
	  "write variable NAME (any variable) as M shards; M = 1 makes it\n"
	  "one plain entry. Repeatable; overrides --shards and --partitioner" },
	{ CLI_OPT_STRING, "partitioner", "SPEC", &partitioner_text, 0, 0,
	  "shard every sharded variable as TensorFlow's partitioner would:\n"
	  "fixed:M, min-size:BYTES[:MAX_SHARDS] or max-size:BYTES[:MAX_SHARDS]\n"
	  "(BYTES may end in K, M or G). min-size's MAX_SHARDS defaults to\n"
	  "1, as TensorFlow's MinSizePartitioner's: min-size:4M alone gives\n"
	  "one shard (write min-size:4M:64); max-size's has no limit" },
	{ CLI_OPT_STRING, "compress", "MODE", &compress, 0, 0,
	  "chunks of OUT: auto (default), lz4 or none (as in dvar import)" },
	{ CLI_OPT_BYTES, "chunk-size", "BYTES", &chunk_size, 0, 0,
	  "raw bytes per chunk of OUT: a multiple of 4K from 4K to 1G\n(default 4M)" },
	{ CLI_OPT_SWITCH, "force", NULL, &force, 1, 0,
	  "replace an existing OUT: the new one is written fully first,\n"
	  "then swapped in, and only then the old one removed" },
	CLI_WRITE_PROGRESS_OPTS(&quiet, &progress),
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage usage = {
	opts,
	"Give --shards or --partitioner (not both), --var, or both kinds. Shards\n"
	"follow TensorFlow's div rule along the first axis: the first rows % M\n"
	"shards one row longer. --shards and --partitioner give a variable with\n"
	"fewer rows than M one shard per row (a scalar one shard), as TensorFlow's\n"
	"partitioners do; --var NAME=M with M above NAME's rows is an error. At most\n"
	"65536 shards per variable. A resharded variable keeps its other\n"
	"attributes; with one shard it loses shards and layout, and kind=sharded\n"
	"becomes kind=plain (as dvar_save writes one shard). A mirrored or\n"
	"sync-on-read variable (--var NAME=M, M > 1) becomes a sharded variable,\n"
	"as dvar_save writes one: kind=sharded, without its synchronization and\n"
	"aggregation (a note says so); it restores into a variable of any kind.\n"
	"Every other variable is copied as it was saved. Memory stays at a few\n"
	"chunks whatever the variable sizes. Nothing is left at OUT when the\n"
	"reshard fails (an unknown --var, a corrupt IN, Ctrl-C, ...).\n"
	"From a TensorFlow checkpoint: OUT is a dvar checkpoint; a partitioned\n"
	"variable (saved as slices) counts as sharded. String tensors (the object\n"
	"graph, vocabularies) are left out, with a note naming each; a dtype dvar\n"
	"has no type for is an error.",
	NULL
};

/* "NAME=M" with M a whole number >= 1. */
static int parse_var_rule(char *text, dvar_shard_count *out)
{
	char *eq = strrchr(text, '='), *end;

	if (!eq || eq == text || eq[1] == '\0')
		return cli_usage_error("reshard", "--var '%s' is not NAME=M", text);
	errno = 0;
	long long m = strtoll(eq + 1, &end, 10);
	if (errno || *end || eq[1] < '0' || eq[1] > '9')
		return cli_usage_error("reshard", "--var '%s': M must be a whole number", text);
	if (m < 1)
		return cli_usage_error("reshard", "--var '%s': M must be at least 1", text);
	*eq = '\0';
	out->name = text;
	out->shards = m;
	return 0;
}

static int check_options(dvar_reshard_options *ro, dvar_shard_count *rules)
{
	int rc;

	if ((rc = cli_parse_compress("reshard", compress, &ro->compress)) != 0 ||
	    (rc = cli_check_chunk_size("reshard", chunk_size)) != 0)
		return rc;
	if (shards >= 0 && partitioner_text)
		return cli_usage_error("reshard", "--shards and --partitioner both say how to shard "
		                                  "every sharded variable: give one of them");
	if (shards == 0)
		return cli_usage_error("reshard", "--shards must be at least 1");
	if (shards < 0 && !partitioner_text && var_opts.n == 0)
		return cli_usage_error("reshard", "nothing to do: give --shards, --partitioner or --var");
	dvar_partitioner part;
	if (partitioner_text && dvar_partitioner_parse(&part, partitioner_text) != DVAR_OK)
		return cli_usage_error("reshard", "--partitioner: %s", cli_dvar_message());
	for (int k = 0; k < var_opts.n; k++) {
		if ((rc = parse_var_rule(var_opts.v[k], &rules[k])) != 0)
			return rc;
		for (int j = 0; j < k; j++)
			if (strcmp(rules[j].name, rules[k].name) == 0)
				return cli_usage_error("reshard", "--var gives variable '%s' twice",
				                       rules[k].name);
	}
	ro->shards = shards > 0 ? shards : 0;
	ro->partitioner = partitioner_text;
	ro->vars = rules;
	ro->num_vars = (size_t)var_opts.n;
	ro->chunk_size = chunk_size;
	return 0;
}

int cmd_reshard(int argc, char **argv)
{
	dvar_reshard_options ro = DVAR_RESHARD_OPTIONS_INIT;
	cli_op op;
	int rc = cli_parse(&usage, argc, argv);

	if (rc != CLI_CONTINUE)
		return rc;
	dvar_shard_count *rules = calloc((size_t)var_opts.n + 1, sizeof(*rules));
	if (!rules)
		return cli_error("reshard", "out of memory");
	cli_output out;
	if ((rc = check_options(&ro, rules)) == 0 &&
	    (rc = cli_output_begin(&out, "reshard", out_path, 0, force)) == 0) {
		cli_op_begin(&op, &ro.cb, "reshard", progress, quiet);
		rc = cli_op_finish(&op, &out, dvar_reshard(in_path, out.target, &ro));
	}
	free(rules);
	return rc;
}
