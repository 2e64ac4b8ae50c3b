/*
 * cli/main.c - the dvar command: the command table, dispatch, `help` and
 * `version`. Each other command lives in its own cmd_<name>.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const cli_cmd cmds[] = {
	{ "import", cmd_import, "Create a checkpoint from .npy, .npz and .safetensors files" },
	{ "inspect", cmd_inspect, "List a checkpoint's variables: dtype, shape, slices, sizes" },
	{ "cat", cmd_cat, "Print a variable (or a slice of it), or write it to a .npy or raw file" },
	{ "verify", cmd_verify, "Read every chunk of a checkpoint and check its checksum" },
	{ "diff", cmd_diff, "Compare two checkpoints variable by variable" },
	{ "ls", cmd_ls, "List the checkpoints under a checkpoint root" },
	{ "reshard", cmd_reshard, "Write a checkpoint with sharded variables split into M shards" },
	{ "export", cmd_export, "Write the variables for serving (full tensors) or as a TF checkpoint" },
	{ "digest", cmd_digest, "Print each variable's CRC-32C digest, the same whatever its sharding" },
	{ "help", cmd_help, "Show help for dvar or for one command" },
	{ "version", cmd_version, "Show the version of dvar and libdvar" },
	{ NULL, NULL, NULL }
};

const cli_cmd *cli_cmd_find(const char *name)
{
	for (const cli_cmd *c = cmds; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static void print_overview(FILE *f)
{
	fprintf(f, "usage: dvar <command> [options] [args]\n"
	           "       dvar --help | --version\n\n"
	           "Commands:\n");
	for (const cli_cmd *c = cmds; c->name; c++)
		fprintf(f, "  %-9s %s\n", c->name, c->desc);
	fprintf(f, "\nA checkpoint PATH is a checkpoint directory, or a checkpoint root holding\n"
	           "a `checkpoint` file (then its latest checkpoint), or a TensorFlow\n"
	           "checkpoint: its prefix (.../model.ckpt-100, .../variables/variables), or a\n"
	           "directory whose TF `checkpoint` state file names one (then its latest).\n"
	           "Run 'dvar help <command>' or 'dvar <command> --help' for its options.\n\n"
	           "Exit status:\n"
	           "  0  success\n"
	           "  1  a check failed: verify found corruption, diff found differences\n"
	           "  2  usage error\n"
	           "  3  runtime error (I/O, a missing or unreadable checkpoint, a bad .npy file)\n");
}

static const char *help_name;

static const cli_opt help_opts[] = {
	{ CLI_OPT_ARG, "COMMAND", NULL, &help_name, 0, 0, "the command to describe" },
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage help_usage = {
	help_opts, "Without COMMAND, list the commands and the exit codes.", NULL
};

static int cmd_help(int argc, char **argv)
{
	int rc = cli_parse(&help_usage, argc, argv);
	if (rc != CLI_CONTINUE)
		return rc;
	if (!help_name) {
		print_overview(stdout);
		return CLI_EXIT_OK;
	}
	const cli_cmd *c = cli_cmd_find(help_name);
	if (!c)
		return cli_usage_error("help", "'%s' is not a dvar command", help_name);
	char *help_argv[] = { (char *)c->name, "--help", NULL };
	return c->fn(2, help_argv);
}

static const cli_opt version_opts[] = {
	{ CLI_OPT_END, NULL, NULL, NULL, 0, 0, NULL }
};

static const cli_usage version_usage = { version_opts, NULL, NULL };

static int cmd_version(int argc, char **argv)
{
	int rc = cli_parse(&version_usage, argc, argv);
	if (rc != CLI_CONTINUE)
		return rc;
	/* The two differ when the command runs against another libdvar.so. */
	printf("dvar %s (libdvar %s)\n", DVAR_VERSION_STRING, dvar_version());
	return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_overview(stderr);
		return CLI_EXIT_USAGE;
	}
	const char *name = argv[1];
	if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
		name = "help";
	else if (strcmp(name, "--version") == 0)
		name = "version";
	const cli_cmd *c = cli_cmd_find(name);
	if (!c) {
		char near[256];
		cli_suggest sg;
		cli_suggest_init(&sg, argv[1]);
		for (c = cmds; c->name; c++)
			cli_suggest_add(&sg, c->name, c->name);
		fprintf(stderr, "dvar: '%s' is not a dvar command%s See 'dvar help'.\n", argv[1],
		        sg.n ? cli_suggest_text(&sg, "", near, sizeof(near)) : ".");
		return CLI_EXIT_USAGE;
	}
	argv[1] = (char *)c->name;
	int rc = c->fn(argc - 1, argv + 1);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		/* A full disk or closed pipe must not pass for success; a failure the
		 * command reported is not reported twice. */
		if (rc != CLI_EXIT_OK)
			return rc;
		fprintf(stderr, "dvar %s: writing to stdout failed: %s\n", c->name, strerror(errno));
		return CLI_EXIT_RUNTIME;
	}
	return rc;
}
