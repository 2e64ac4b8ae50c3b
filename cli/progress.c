/*
 * cli/progress.c - one progress line on stderr, redrawn in place with '\r'.
 * Only on a terminal (or when forced), never with --json, at most about six
 * times a second, and in the automatic mode only once an operation has run
 * for a second, so quick commands print nothing extra.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define PROGRESS_INTERVAL (1.0 / 6)
#define PROGRESS_DELAY 1.0

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, const char *label, int mode, int quiet)
{
	memset(p, 0, sizeof(*p));
	p->label = label;
	p->eager = mode == 1 && !quiet;
	p->enabled = (mode < 0 ? isatty(STDERR_FILENO) : mode) && !quiet;
	p->start = p->last = now();
}

void cli_progress_update(void *userdata, uint64_t done, uint64_t total)
{
	cli_progress *p = userdata;
	char line[160], d[32], t[32];

	if (!p->enabled)
		return;
	double tnow = now();
	if (!p->eager && tnow - p->start < PROGRESS_DELAY)
		return;
	/* The first draw is never throttled, later ones are. */
	if (p->width && tnow - p->last < PROGRESS_INTERVAL)
		return;
	p->last = tnow;
	if (!total)
		total = p->total;

	cli_format_bytes(d, sizeof(d), done);
	cli_format_bytes(t, sizeof(t), total);
	int n;
	if (total)
		n = snprintf(line, sizeof(line), "%s: %3d%% (%s of %s)", p->label,
		             (int)(done * 100.0 / (double)total), d, t);
	else
		n = snprintf(line, sizeof(line), "%s: %s", p->label, d);
	if (n < 0)
		return;
	/* Pad with spaces over what is left of a longer previous line. */
	int pad = (size_t)n < p->width ? (int)(p->width - (size_t)n) : 0;
	fprintf(stderr, "\r%s%*s", line, pad, "");
	fflush(stderr);
	p->width = (size_t)n + (size_t)pad;
}

void cli_progress_end(cli_progress *p)
{
	if (!p->width)
		return;
	fprintf(stderr, "\r%*s\r", (int)p->width, "");
	fflush(stderr);
	p->width = 0;
}

/* ------------------------------------------------------------ operations */

/* Set by SIGINT and SIGTERM while an operation runs: the library stops at
 * its next piece and removes what it wrote. */
static volatile sig_atomic_t cancelled;

static void on_signal(int sig)
{
	(void)sig;
	cancelled = 1;
}

static void print_note(void *userdata, const char *message)
{
	fprintf(stderr, "dvar %s: note: %s\n", ((const cli_op *)userdata)->cmd, message);
}

static void count_written(void *userdata, const char *name, uint64_t bytes)
{
	cli_op *op = userdata;

	(void)name;
	op->vars++;
	op->bytes += bytes;
}

void cli_op_begin(cli_op *op, dvar_callbacks *cb, const char *cmd, int progress, int quiet)
{
	struct sigaction sa;

	memset(op, 0, sizeof(*op));
	op->cmd = cmd;
	op->quiet = quiet;
	op->start = now();
	cli_progress_init(&op->pr, cmd, progress, quiet);
	memset(cb, 0, sizeof(*cb));
	cb->progress = cli_progress_update;
	cb->progress_userdata = &op->pr;
	cb->note = print_note;
	cb->note_userdata = op;
	cb->written = count_written;
	cb->written_userdata = op;
	cb->cancel = &cancelled;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

int cli_op_finish(cli_op *op, cli_output *out, int status)
{
	char size[32];
	int rc;

	if (status == DVAR_OK) {
		rc = cli_output_commit(out, op->cmd);
	} else {
		rc = cli_error_dvar(op->cmd);
		cli_output_abort(out);
	}
	cli_progress_end(&op->pr);
	if (rc != CLI_EXIT_OK || op->quiet || !isatty(STDERR_FILENO))
		return rc;
	cli_format_bytes(size, sizeof(size), op->bytes);
	fprintf(stderr, "dvar %s: wrote '%s': %llu variable%s, %s in %.2f s\n", op->cmd, out->out,
	        (unsigned long long)op->vars, op->vars == 1 ? "" : "s", size, now() - op->start);
	return rc;
}
