/*
 * examples/train.c - dvar-train: trains the click model of model.h on R
 * replicas per worker x W workers (`mpirun -np W dvar-train ...`; W = 1
 * without mpirun), checkpointing every K steps from every worker, and
 * resuming from the latest checkpoint on the same or another topology.
 *
 * One step: the iterator hands each local replica its part of the global
 * batch; the worker looks up the embedding rows of all its replicas' ids in
 * one call (the table is sharded across the workers); each replica computes
 * its loss and gradients, all-reduces the dense gradients and applies them
 * to its copy of the mirrored dense layer, and counts its metrics into
 * sync-on-read variables; the worker then sends the embedding gradients to
 * the rows' owners (a scatter-sub). Every sum has a fixed order, so a run
 * is reproducible bit for bit on a given topology, and stopping and
 * resuming changes nothing.
 *
 * With --device cuda the replicas keep their copies of the dense layer and
 * the metrics on GPUs: the gradients are all-reduced there (dvar's fixed
 * order, so a GPU run and a CPU run of the same order give the same bytes)
 * and applied there; the table and the input stay in host memory, as dvar
 * keeps every sharded variable. The model's arithmetic runs on the host.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dvar/dvar.h>

#include "model.h"

typedef struct {
	const char *ckpt;
	const char *predict;
	int64_t steps, save_every, batch, vocab, dim, examples, log_every, kill_at;
	int replicas, shards, keep, resume, json, progress, full_every;
	int device; /* DVAR_DEVICE_*, or -1: CUDA when a GPU is there */
	uint64_t seed;
} options;

/* What one local replica works with during a step (its own scratch). */
typedef struct {
	float *kernel; /* dim + MODEL_FEATURES: this replica's copy, read at the start */
	float *grad;   /* dim + MODEL_FEATURES + 1: kernel gradients, then the bias's */
	float *pooled; /* dim */
	int64_t first; /* its first id in the worker's ids */
	int64_t loss_nanos, examples, correct;
} replica_scratch;

typedef struct {
	options o;
	dvar_strategy *s;
	int R, W, worker;
	float *data; /* the dataset: examples x MODEL_ROW */
	dvar_dataset *ds;
	dvar_input_iterator *it;
	dvar_sharded_variable *emb;
	dvar_variable *vars[5]; /* kernel, bias, loss, examples, correct: the manager's list */
	dvar_values *grads;     /* each replica's dense gradient, where its variables live */
	dvar_manager *m;
	/* What each committed save wrote (dvar_save_last), for the summary. */
	dvar_save_info *saves;
	size_t num_saves;
	int64_t step;           /* MODEL_STEP's value */
	/* The seed makes the data: a resume with another would train on other
	 * examples without a word, so it is saved and checked. */
	int64_t seed;
	dvar_store_tensor tensors[2]; /* MODEL_STEP, MODEL_SEED */
	dvar_replica_batch *batches;
	replica_scratch *scratch;
	int64_t *ids;      /* the ids of every local row, local replica by replica */
	float *rows;       /* their embedding rows */
	float *emb_delta;  /* the update of each of those rows */
	size_t ids_cap;
	int64_t global_rows; /* rows of the current global batch, to average the loss */
} job;

enum { V_KERNEL, V_BIAS, V_LOSS, V_EXAMPLES, V_CORRECT };

static int worker_id;
/* The strategy, for die(): freeing it discards a pending asynchronous save
 * (its thread joined, its staging removed), which exit alone would leave
 * half-written for the next save into the root to clear. */
static dvar_strategy *live_strategy;
static pthread_t main_thread;

static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "dvar-train: ");
	if (worker_id > 0)
		fprintf(stderr, "worker %d: ", worker_id);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (live_strategy && pthread_equal(pthread_self(), main_thread))
		dvar_strategy_free(live_strategy);
	exit(1);
}

/* Exit with dvar's message when rc is an error. */
static void check(int rc, const char *what)
{
	if (rc != DVAR_OK) {
		const dvar_error *e = dvar_error_last();
		die("%s: %s", what, e && e->message[0] ? e->message : dvar_strerror(rc));
	}
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: [mpirun -np W] dvar-train --ckpt DIR [options]\n"
	        "\n"
	        "Train a click model (a sharded embedding table, a mirrored dense layer,\n"
	        "sync-on-read metrics) on synthetic data, checkpointing into DIR.\n"
	        "\n"
	        "  --ckpt DIR        checkpoint root (required)\n"
	        "  --steps N         train until global step N (default 300)\n"
	        "  --save-every K    checkpoint every K steps, and at the end (default 100)\n"
	        "  --keep N          keep the last N checkpoints, 0 = all (default 5)\n"
	        "  --full-every K    save deltas (what changed since the last save), with a\n"
	        "                    full checkpoint every K saves; 1: every save full\n"
	        "                    (default 4)\n"
	        "  --resume          continue from DIR's latest checkpoint (variables and\n"
	        "                    input position); a fresh start when DIR has none\n"
	        "  --replicas R      replicas per worker (default 1)\n"
	        "  --device D        where the replicas keep the dense layer and the\n"
	        "                    metrics: cpu (default), cuda (the GPUs, replica i on\n"
	        "                    GPU i mod their number), or auto (cuda when a GPU\n"
	        "                    is there)\n"
	        "  --shards S        shards of the embedding table (default 4)\n"
	        "  --batch B         global batch size (default 256)\n"
	        "  --seed S          seed of the data and the initial values (default 1)\n"
	        "  --vocab N         embedding rows (default 200000, at most 2^24)\n"
	        "  --dim N           embedding width (default 32)\n"
	        "  --examples N      examples in one epoch of the dataset (default 131072)\n"
	        "  --log-every N     a progress line every N steps (default 10)\n"
	        "  --progress, --no-progress\n"
	        "                    show progress lines on stderr, or not (default: when\n"
	        "                    stderr is a terminal; under mpirun it never is)\n"
	        "  --predict FILE    after training, print the prediction for each query\n"
	        "                    line of FILE (ids, optionally ';' and %d features),\n"
	        "                    as dvar-serve prints it\n"
	        "  --json            print one JSON summary at the end\n"
	        "  --kill-at STEP    the last worker kills itself (SIGKILL) after STEP:\n"
	        "                    a crash to resume from\n"
	        "\n"
	        "Topology-dependent options (--replicas, --shards, the number of workers)\n"
	        "may change between runs; the model options (--batch --seed --vocab --dim\n"
	        "--examples) must stay those of the checkpoint: a resume checks them.\n",
	        MODEL_FEATURES);
}

static int64_t int_arg(const char *name, const char *v, int64_t lo, int64_t hi)
{
	char *end;
	long long x;
	if (!v) {
		fprintf(stderr, "dvar-train: %s needs a value\n", name);
		exit(2);
	}
	errno = 0;
	x = strtoll(v, &end, 10);
	if (errno || end == v || *end || x < lo || x > hi) {
		fprintf(stderr, "dvar-train: %s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]\n",
		        name, v, lo, hi);
		exit(2);
	}
	return x;
}

static void parse_options(options *o, int argc, char **argv)
{
	*o = (options){ .steps = 300, .save_every = 100, .batch = 256, .vocab = 200000, .dim = 32,
		        .examples = 131072, .log_every = 10, .replicas = 1, .shards = 4, .keep = 5,
		        .full_every = 4,
		        .seed = 1, .progress = -1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--resume")) {
			o->resume = 1;
			continue;
		} else if (!strcmp(a, "--json")) {
			o->json = 1;
			continue;
		} else if (!strcmp(a, "--progress") || !strcmp(a, "--no-progress")) {
			o->progress = a[2] == 'p';
			continue;
		}
		v = i + 1 < argc ? argv[++i] : NULL;
		if (!strcmp(a, "--ckpt"))
			o->ckpt = v;
		else if (!strcmp(a, "--predict"))
			o->predict = v;
		else if (!strcmp(a, "--steps"))
			o->steps = int_arg(a, v, 0, INT64_C(1) << 40);
		else if (!strcmp(a, "--save-every"))
			o->save_every = int_arg(a, v, 1, INT64_C(1) << 40);
		else if (!strcmp(a, "--keep"))
			o->keep = (int)int_arg(a, v, 0, 1 << 20);
		else if (!strcmp(a, "--full-every"))
			o->full_every = (int)int_arg(a, v, 1, 1 << 20);
		else if (!strcmp(a, "--device")) {
			if (v && !strcmp(v, "cpu"))
				o->device = DVAR_DEVICE_CPU;
			else if (v && !strcmp(v, "cuda"))
				o->device = DVAR_DEVICE_CUDA;
			else if (v && !strcmp(v, "auto"))
				o->device = -1;
			else if (v) {
				fprintf(stderr, "dvar-train: --device: '%s' is not cpu, cuda or auto\n", v);
				exit(2);
			}
		} else if (!strcmp(a, "--replicas"))
			o->replicas = (int)int_arg(a, v, 1, 256);
		else if (!strcmp(a, "--shards"))
			o->shards = (int)int_arg(a, v, 1, 1 << 16);
		else if (!strcmp(a, "--batch"))
			o->batch = int_arg(a, v, 1, 1 << 24);
		else if (!strcmp(a, "--seed"))
			o->seed = (uint64_t)int_arg(a, v, 0, INT64_MAX);
		else if (!strcmp(a, "--vocab"))
			o->vocab = int_arg(a, v, 1, MODEL_MAX_VOCAB);
		else if (!strcmp(a, "--dim"))
			o->dim = int_arg(a, v, 1, 4096);
		else if (!strcmp(a, "--examples"))
			o->examples = int_arg(a, v, 1, INT64_C(1) << 28);
		else if (!strcmp(a, "--log-every"))
			o->log_every = int_arg(a, v, 1, INT64_C(1) << 40);
		else if (!strcmp(a, "--kill-at"))
			o->kill_at = int_arg(a, v, 1, INT64_C(1) << 40);
		else {
			fprintf(stderr, "dvar-train: unknown option '%s' (see --help)\n", a);
			exit(2);
		}
		if (!v) {
			fprintf(stderr, "dvar-train: %s needs a value\n", a);
			exit(2);
		}
	}
	if (!o->ckpt) {
		fprintf(stderr, "dvar-train: --ckpt DIR is required (see --help)\n");
		exit(2);
	}
}

/* ---------------------------------------------------------------- set-up */

static int embedding_init(void *arg, int dtype, const dvar_shape *shape, const int64_t *offset,
                          void *dst)
{
	const options *o = arg;
	(void)dtype;
	model_embedding_init(o->seed, offset[0], shape->dims[0], o->dim, dst);
	return DVAR_OK;
}

static void create_variable(job *j, int slot, const char *name, int dtype, int rank,
                            const int64_t *dims, const void *init, int sync, int agg)
{
	dvar_variable_spec spec = DVAR_VARIABLE_SPEC_INIT;
	spec.name = name;
	spec.dtype = dtype;
	check(dvar_shape_init(&spec.shape, rank, dims), name);
	spec.initial_value = init;
	spec.synchronization = sync;
	spec.aggregation = agg;
	check(dvar_variable_create(&j->vars[slot], j->s, &spec), name);
}

static void create_model(job *j)
{
	const options *o = &j->o;
	int64_t nk = o->dim + MODEL_FEATURES;
	float *kernel = xcalloc((size_t)nk, sizeof *kernel), bias = 0.0f;
	dvar_partitioner p = DVAR_PARTITIONER_FIXED_INIT(o->shards);
	dvar_sharded_variable_spec es = DVAR_SHARDED_VARIABLE_SPEC_INIT;

	es.name = MODEL_EMBEDDING;
	es.dtype = DVAR_FLOAT32;
	check(dvar_shape_init(&es.shape, 2, (int64_t[]){ o->vocab, o->dim }), "embedding shape");
	es.partitioner = &p;
	es.init = embedding_init;
	es.init_arg = (void *)o;
	check(dvar_sharded_variable_create(&j->emb, j->s, &es), "creating the embedding table");

	/* The dense layer is updated with gradients all-reduced by hand, so
	 * each replica applies the same delta to its own copy (NONE). */
	model_kernel_init(o->seed, o->dim, kernel);
	create_variable(j, V_KERNEL, MODEL_KERNEL, DVAR_FLOAT32, 2, (int64_t[]){ nk, 1 }, kernel,
	                DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE);
	create_variable(j, V_BIAS, MODEL_BIAS, DVAR_FLOAT32, 1, (int64_t[]){ 1 }, &bias,
	                DVAR_SYNC_ON_WRITE, DVAR_AGG_NONE);
	/* Metrics in int64 so that a restore onto any replica count splits
	 * them exactly (a float sum split over N would not add back bit for bit). */
	create_variable(j, V_LOSS, MODEL_LOSS, DVAR_INT64, 0, NULL, NULL, DVAR_SYNC_ON_READ,
	                DVAR_AGG_SUM);
	create_variable(j, V_EXAMPLES, MODEL_EXAMPLES, DVAR_INT64, 0, NULL, NULL, DVAR_SYNC_ON_READ,
	                DVAR_AGG_SUM);
	create_variable(j, V_CORRECT, MODEL_CORRECT, DVAR_INT64, 0, NULL, NULL, DVAR_SYNC_ON_READ,
	                DVAR_AGG_SUM);
	free(kernel);
}

static void create_dataset(job *j)
{
	const options *o = &j->o;
	dvar_shape shape;

	j->data = xcalloc((size_t)o->examples, MODEL_ROW * sizeof(float));
	for (int64_t i = 0; i < o->examples; i++)
		model_example(o->seed, o->vocab, i, j->data + i * MODEL_ROW);
	check(dvar_shape_init(&shape, 2, (int64_t[]){ o->examples, MODEL_ROW }), "dataset shape");
	check(dvar_dataset_from_array(&j->ds, DVAR_FLOAT32, &shape, j->data), "dataset");
}

/* An iterator over one epoch. DATA sharding keeps every global batch the
 * same whatever the topology, which is what lets a resume change it. */
static void open_input(job *j)
{
	dvar_input_options io = DVAR_INPUT_OPTIONS_INIT;
	io.batch_size = j->o.batch;
	io.auto_shard_policy = DVAR_AUTO_SHARD_DATA;
	io.name = MODEL_INPUT;
	check(dvar_distribute_dataset(&j->it, j->s, j->ds, &io), "distributing the dataset");
}

static void open_manager(job *j)
{
	dvar_save_options so = DVAR_SAVE_OPTIONS_INIT;
	dvar_restore_options ro = DVAR_RESTORE_OPTIONS_INIT;
	dvar_manager_options mo = DVAR_MANAGER_OPTIONS_INIT;

	so.tensors = ro.tensors = j->tensors;
	so.num_tensors = ro.num_tensors = 2;
	so.sharded = ro.sharded = &j->emb;
	so.num_sharded = ro.num_sharded = 1;
	so.iterators = ro.iterators = &j->it;
	so.num_iterators = ro.num_iterators = 1;
	mo.save_every = j->o.save_every;
	mo.keep_last = j->o.keep;
	mo.async = 1;
	mo.delta = j->o.full_every != 1;
	mo.full_every = j->o.full_every;
	mo.save = &so;
	mo.restore = &ro;
	check(dvar_manager_open(&j->m, j->s, j->o.ckpt, j->vars, 5, &mo), j->o.ckpt);
}

/* Record the save committed last, when it is new: what it wrote goes into
 * the summary and, on a terminal, a progress line. */
static void note_save(job *j, int tty)
{
	dvar_save_info in;

	if (dvar_save_last(j->s, &in) != DVAR_OK ||
	    (j->num_saves && j->saves[j->num_saves - 1].step == in.step))
		return;
	j->saves = realloc(j->saves, (j->num_saves + 1) * sizeof *j->saves);
	if (!j->saves)
		die("out of memory");
	j->saves[j->num_saves++] = in;
	if (tty)
		fprintf(stderr, "step %" PRId64 ": ckpt-%" PRId64 " committed, %s%s, %.2f MiB written\n",
		        j->step, in.step, in.is_delta ? "a delta over " : "full",
		        in.is_delta ? in.base : "", (double)in.bytes / (1 << 20));
}

/* A new epoch: the iterator over the dataset starts again. The manager
 * keeps it, and with it the last save a delta builds on. */
static void next_epoch(job *j)
{
	check(dvar_input_iterator_reset(j->it), "starting a new epoch");
}

/* ---------------------------------------------------------------- a step */

static int replica_step(dvar_replica *ctx, void *arg)
{
	job *j = arg;
	int local = dvar_replica_local_id(ctx);
	const dvar_replica_batch *b = &j->batches[local];
	replica_scratch *sc = &j->scratch[local];
	int64_t dim = j->o.dim, nk = dim + MODEL_FEATURES;
	float bias, inv = 1.0f / (float)j->global_rows;
	const void *step; /* the replica's gradient where its variables live */
	dvar_shape shape;
	int rc;

	if ((rc = dvar_variable_read(j->vars[V_KERNEL], ctx, sc->kernel,
	                             (size_t)nk * sizeof(float))) != DVAR_OK ||
	    (rc = dvar_variable_read(j->vars[V_BIAS], ctx, &bias, sizeof bias)) != DVAR_OK)
		return rc;
	memset(sc->grad, 0, (size_t)(nk + 1) * sizeof(float));
	sc->loss_nanos = sc->correct = 0;
	sc->examples = b->rows;
	for (int64_t i = 0; i < b->rows; i++) {
		const float *x = (const float *)b->data + i * MODEL_ROW;
		int64_t at = sc->first + i * MODEL_IDS;
		float y = x[MODEL_LABEL];
		float z = model_logit(j->rows + at * dim, MODEL_IDS, dim, x, sc->kernel, bias,
		                      sc->pooled);
		/* d(mean loss over the global batch) / d(logit) */
		float g = (model_sigmoid(z) - y) * inv;

		for (int64_t c = 0; c < dim; c++)
			sc->grad[c] += g * sc->pooled[c];
		for (int f = 0; f < MODEL_FEATURES; f++)
			sc->grad[dim + f] += g * x[f];
		sc->grad[nk] += g;
		for (int k = 0; k < MODEL_IDS; k++)
			for (int64_t c = 0; c < dim; c++)
				j->emb_delta[(at + k) * dim + c] = MODEL_LR_EMBEDDING * g * sc->kernel[c];
		sc->loss_nanos += llround(model_loss(z, y) * 1e9);
		sc->correct += (z > 0) == (y > 0.5f);
	}
	/* Every replica gets the same summed step and applies it to its own
	 * copy. The step is summed where the copies live: the gradient goes
	 * there first (the learning rate, a power of two, scales exactly, so
	 * scaling before the sum changes no bit). */
	for (int64_t c = 0; c <= nk; c++)
		sc->grad[c] *= MODEL_LR_DENSE;
	if ((rc = dvar_shape_init(&shape, 1, (int64_t[]){ nk + 1 })) != DVAR_OK ||
	    (rc = dvar_values_set(j->grads, local, &shape, sc->grad)) != DVAR_OK ||
	    (rc = dvar_values_get(j->grads, local, NULL, &step)) != DVAR_OK ||
	    (rc = dvar_replica_all_reduce(ctx, DVAR_REDUCE_SUM, DVAR_FLOAT32, step, (void *)step,
	                                  (size_t)nk + 1)) != DVAR_OK)
		return rc;
	if ((rc = dvar_variable_assign_sub(j->vars[V_KERNEL], ctx, step)) != DVAR_OK ||
	    (rc = dvar_variable_assign_sub(j->vars[V_BIAS], ctx, (const float *)step + nk)) != DVAR_OK ||
	    (rc = dvar_variable_assign_add(j->vars[V_LOSS], ctx, &sc->loss_nanos)) != DVAR_OK ||
	    (rc = dvar_variable_assign_add(j->vars[V_EXAMPLES], ctx, &sc->examples)) != DVAR_OK)
		return rc;
	return dvar_variable_assign_add(j->vars[V_CORRECT], ctx, &sc->correct);
}

/* The next step's batches; a new epoch when the dataset has run out. */
static void next_batches(job *j)
{
	int has = 0;

	check(dvar_input_iterator_next(j->it, j->batches, &has), "reading the input");
	if (!has) {
		next_epoch(j);
		check(dvar_input_iterator_next(j->it, j->batches, &has), "reading the input");
		if (!has)
			die("the dataset yields no batch");
	}
}

static void train_step(job *j)
{
	const options *o = &j->o;
	int64_t per_epoch = (o->examples + o->batch - 1) / o->batch;
	int64_t k = j->step % per_epoch; /* this step's batch within its epoch */
	int64_t n = 0;
	size_t row_bytes = (size_t)o->dim * sizeof(float);

	next_batches(j);
	j->global_rows = o->examples - k * o->batch < o->batch ? o->examples - k * o->batch
	                                                          : o->batch;
	for (int r = 0; r < j->R; r++) {
		const dvar_replica_batch *b = &j->batches[r];
		/* The iterator and global_step come from one checkpoint; a batch
		 * from elsewhere in the epoch means they do not agree. */
		if (b->rows && (b->indices[0] < k * o->batch ||
		                b->indices[b->rows - 1] >= k * o->batch + j->global_rows))
			die("the input is at element %" PRId64 " but global step %" PRId64
			    " reads elements [%" PRId64 ", %" PRId64 ")",
			    b->indices[0], j->step, k * o->batch, k * o->batch + j->global_rows);
		n += b->rows * MODEL_IDS;
	}
	if ((size_t)n > j->ids_cap) {
		free(j->ids), free(j->rows), free(j->emb_delta);
		j->ids = xcalloc((size_t)n, sizeof *j->ids);
		j->rows = xcalloc((size_t)n, row_bytes);
		j->emb_delta = xcalloc((size_t)n, row_bytes);
		j->ids_cap = (size_t)n;
	}
	n = 0;
	for (int r = 0; r < j->R; r++) {
		const dvar_replica_batch *b = &j->batches[r];
		j->scratch[r].first = n;
		for (int64_t i = 0; i < b->rows; i++)
			for (int c = 0; c < MODEL_IDS; c++)
				j->ids[n++] = (int64_t)((const float *)b->data)[i * MODEL_ROW + MODEL_ID0 + c];
	}
	check(dvar_embedding_lookup(j->emb, DVAR_PARTITION_DIV, j->ids, (size_t)n, 0.0, j->rows,
	                            (uint64_t)n * row_bytes),
	      "embedding lookup");
	check(dvar_strategy_run(j->s, replica_step, j), "training step");
	check(dvar_sharded_variable_scatter(j->emb, DVAR_SCATTER_SUB, j->ids, (size_t)n,
	                                    j->emb_delta, (uint64_t)n * row_bytes),
	      "embedding update");
	j->step++;
}

/* ---------------------------------------------------------------- reporting */

typedef struct {
	int64_t loss_nanos, examples, correct;
} metrics;

/* Collective: the metrics summed over every replica of every worker. */
static metrics read_metrics(job *j)
{
	metrics m;
	check(dvar_variable_read(j->vars[V_LOSS], NULL, &m.loss_nanos, sizeof m.loss_nanos), "metrics");
	check(dvar_variable_read(j->vars[V_EXAMPLES], NULL, &m.examples, sizeof m.examples), "metrics");
	check(dvar_variable_read(j->vars[V_CORRECT], NULL, &m.correct, sizeof m.correct), "metrics");
	return m;
}

static double mean_loss(metrics a, metrics b)
{
	int64_t n = b.examples - a.examples;
	return n ? (double)(b.loss_nanos - a.loss_nanos) * 1e-9 / (double)n : 0.0;
}

static double accuracy(metrics a, metrics b)
{
	int64_t n = b.examples - a.examples;
	return n ? (double)(b.correct - a.correct) / (double)n : 0.0;
}

typedef struct {
	const char *name;
	uint32_t crc;
} checksum;

/* Collective: CRC-32C of every variable's value as a reader of the
 * checkpoint would see it (the full table; the dense layer's primary; the
 * metrics' sums), independent of the topology. */
static void checksums(job *j, checksum *out, metrics *final)
{
	size_t bytes = (size_t)j->o.vocab * (size_t)j->o.dim * sizeof(float);
	void *buf = xcalloc(1, bytes);
	dvar_shape shape;

	check(dvar_sharded_variable_read(j->emb, NULL, 0, buf, bytes, &shape), "reading the table");
	out[0] = (checksum){ MODEL_EMBEDDING, dvar_crc32c_extend(0, buf, bytes) };
	for (int v = 0; v < 5; v++) {
		size_t nb = dvar_variable_nbytes(j->vars[v]);
		check(dvar_variable_read(j->vars[v], NULL, buf, nb), dvar_variable_name(j->vars[v]));
		out[1 + v] = (checksum){ dvar_variable_name(j->vars[v]), dvar_crc32c_extend(0, buf, nb) };
	}
	free(buf);
	*final = read_metrics(j);
}

/* Collective: print the prediction of every query of o->predict (every
 * worker parses the file, worker 0 looks the ids up and prints). */
static void predict(job *j)
{
	FILE *f = fopen(j->o.predict, "r");
	char *line = NULL, err[256];
	size_t cap = 0;
	int64_t nk = j->o.dim + MODEL_FEATURES;
	float *kernel = xcalloc((size_t)nk, sizeof *kernel), bias, *rows, *pooled;
	int lineno = 0;

	if (!f)
		die("--predict %s: %s", j->o.predict, strerror(errno));
	rows = xcalloc(MODEL_MAX_QUERY_IDS, (size_t)j->o.dim * sizeof(float));
	pooled = xcalloc((size_t)j->o.dim, sizeof(float));
	check(dvar_variable_read(j->vars[V_KERNEL], NULL, kernel, (size_t)nk * sizeof(float)), "kernel");
	check(dvar_variable_read(j->vars[V_BIAS], NULL, &bias, sizeof bias), "bias");
	while (getline(&line, &cap, f) >= 0) {
		model_query q;
		int rc = model_parse_query(line, &q, err, sizeof err);
		size_t n;
		lineno++;
		if (rc < 0)
			die("%s:%d: %s", j->o.predict, lineno, err);
		if (rc == 0)
			continue;
		for (int k = 0; k < q.nids; k++)
			if (q.ids[k] >= j->o.vocab)
				die("%s:%d: id %" PRId64 " is out of range (vocab %" PRId64 ")",
				    j->o.predict, lineno, q.ids[k], j->o.vocab);
		n = j->worker == 0 ? (size_t)q.nids : 0;
		check(dvar_embedding_lookup(j->emb, DVAR_PARTITION_DIV, q.ids, n, 0.0, rows,
		                            (uint64_t)n * (uint64_t)j->o.dim * sizeof(float)),
		      "embedding lookup");
		if (j->worker == 0)
			model_print_prediction(stdout, &q,
			                       model_logit(rows, q.nids, j->o.dim,
			                                   q.has_features ? q.features : NULL, kernel,
			                                   bias, pooled));
	}
	fclose(f);
	free(line), free(kernel), free(rows), free(pooled);
}

/* ---------------------------------------------------------------- main */

/* DIR must not hold checkpoints unless --resume says to continue them. */
static void check_fresh_root(const options *o)
{
	dvar_root_list *l;
	if (o->resume || access(o->ckpt, F_OK) != 0)
		return;
	check(dvar_root_list_open(&l, o->ckpt), o->ckpt);
	for (size_t i = 0; i < dvar_root_list_count(l); i++) {
		dvar_root_entry e;
		check(dvar_root_list_get(l, i, &e), o->ckpt);
		if (e.is_latest)
			die("%s already holds checkpoints (the latest is %s): pass --resume to "
			    "continue from it, or choose another --ckpt",
			    o->ckpt, e.name);
	}
	dvar_root_list_free(l);
}

static const char *device_name(int device)
{
	return device == DVAR_DEVICE_CUDA ? "cuda" : "cpu";
}

/* The strategy's device: --device auto takes the GPUs when there are any. */
static int choose_device(int device)
{
	int n;

	if (device >= 0)
		return device;
	return dvar_cuda_device_count(&n) == DVAR_OK ? DVAR_DEVICE_CUDA : DVAR_DEVICE_CPU;
}

int main(int argc, char **argv)
{
	job j = { 0 };
	dvar_strategy_options so = DVAR_STRATEGY_OPTIONS_INIT;
	int tty, saved;
	int64_t start;
	metrics first, prev, fin;
	checksum sums[6];
	double t0, tlog;

	parse_options(&j.o, argc, argv);
	so.replicas = j.o.replicas;
	so.device = choose_device(j.o.device);
	check(dvar_strategy_create(&j.s, &so), "creating the strategy");
	live_strategy = j.s;
	main_thread = pthread_self();
	j.R = dvar_strategy_local_replicas(j.s);
	j.W = dvar_strategy_num_workers(j.s);
	j.worker = worker_id = dvar_strategy_worker_id(j.s);
	tty = j.worker == 0 && (j.o.progress < 0 ? isatty(2) : j.o.progress);
	check_fresh_root(&j.o);

	j.seed = (int64_t)j.o.seed;
	j.tensors[0] = (dvar_store_tensor){ .name = MODEL_STEP, .dtype = DVAR_INT64, .data = &j.step };
	j.tensors[1] = (dvar_store_tensor){ .name = MODEL_SEED, .dtype = DVAR_INT64, .data = &j.seed };
	j.batches = xcalloc((size_t)j.R, sizeof *j.batches);
	j.scratch = xcalloc((size_t)j.R, sizeof *j.scratch);
	for (int r = 0; r < j.R; r++) {
		j.scratch[r].kernel = xcalloc((size_t)(j.o.dim + MODEL_FEATURES), sizeof(float));
		j.scratch[r].grad = xcalloc((size_t)(j.o.dim + MODEL_FEATURES + 1), sizeof(float));
		j.scratch[r].pooled = xcalloc((size_t)j.o.dim, sizeof(float));
	}
	create_model(&j);
	check(dvar_values_new(&j.grads, j.s, DVAR_FLOAT32), "the gradients");
	create_dataset(&j);
	open_input(&j);
	open_manager(&j);

	if (j.o.resume) {
		int64_t restored;
		int rc = dvar_manager_restore(j.m, DVAR_MANAGER_LATEST, &restored);
		if (rc == DVAR_ENOTFOUND && j.worker == 0)
			fprintf(stderr, "dvar-train: no checkpoint under %s: starting at step 0\n",
			        j.o.ckpt);
		else if (rc != DVAR_ENOTFOUND)
			check(rc, "restoring");
		if (rc == DVAR_OK && restored != j.step)
			die("checkpoint ckpt-%" PRId64 " holds %s = %" PRId64, restored, MODEL_STEP,
			    j.step);
		if (rc == DVAR_OK && j.seed != (int64_t)j.o.seed)
			die("checkpoint ckpt-%" PRId64 " was trained on the data of --seed %" PRId64
			    "; resume it with that seed",
			    restored, j.seed);
		if (rc == DVAR_OK && tty)
			fprintf(stderr, "resumed from %s/ckpt-%" PRId64 " on %d worker(s) x %d replica(s)\n",
			        j.o.ckpt, restored, j.W, j.R);
	}
	if (j.step > j.o.steps)
		die("the checkpoint is at step %" PRId64 ", beyond --steps %" PRId64, j.step,
		    j.o.steps);

	start = j.step;
	first = prev = read_metrics(&j);
	t0 = tlog = now();
	while (j.step < j.o.steps) {
		train_step(&j);
		check(dvar_manager_step(j.m, j.step, &saved), "saving");
		if (saved && tty)
			fprintf(stderr, "step %" PRId64 ": saving %s/ckpt-%" PRId64 "\n", j.step, j.o.ckpt,
			        j.step);
		note_save(&j, tty);
		if (j.step == j.o.kill_at && j.worker == j.W - 1) {
			fprintf(stderr, "dvar-train: worker %d: killing itself after step %" PRId64 "\n",
			        j.worker, j.step);
			raise(SIGKILL);
		}
		if (j.step % j.o.log_every == 0 || j.step == j.o.steps) {
			metrics cur = read_metrics(&j);
			double t = now();
			if (tty)
				fprintf(stderr,
				        "step %6" PRId64 "/%" PRId64 "  loss %.4f  accuracy %.3f  %.0f examples/s\n",
				        j.step, j.o.steps, mean_loss(prev, cur), accuracy(prev, cur),
				        (double)(cur.examples - prev.examples) / (t > tlog ? t - tlog : 1e-9));
			prev = cur;
			tlog = t;
		}
	}
	/* The final state is always in a checkpoint. */
	if (j.step > start && j.step % j.o.save_every != 0) {
		check(dvar_manager_save(j.m, j.step), "saving");
		note_save(&j, tty);
	}
	check(dvar_manager_wait(j.m), "saving");
	note_save(&j, tty);

	checksums(&j, sums, &fin);
	if (j.o.predict)
		predict(&j);
	if (j.worker == 0) {
		double secs = now() - t0;
		int64_t trained = fin.examples - first.examples;
		if (j.o.json) {
			printf("{\"step\":%" PRId64 ",\"start_step\":%" PRId64 ",\"workers\":%d,"
			       "\"replicas\":%d,\"device\":\"%s\",\"shards\":%d,\"examples\":%" PRId64 ","
			       "\"loss\":%.9g,\"accuracy\":%.9g,\"run_examples\":%" PRId64 ","
			       "\"run_loss\":%.9g,\"run_accuracy\":%.9g,\"seconds\":%.3f,"
			       "\"checkpoint\":\"%s/ckpt-%" PRId64 "\",\"checksums\":{",
			       j.step, start, j.W, j.R, device_name(so.device), j.o.shards, fin.examples,
			       mean_loss((metrics){ 0 }, fin), accuracy((metrics){ 0 }, fin), trained,
			       mean_loss(first, fin), accuracy(first, fin), secs, j.o.ckpt, j.step);
			for (int v = 0; v < 6; v++)
				printf("%s\"%s\":\"%08x\"", v ? "," : "", sums[v].name, sums[v].crc);
			printf("},\"saves\":[");
			for (size_t k = 0; k < j.num_saves; k++) {
				const dvar_save_info *in = &j.saves[k];
				printf("%s{\"step\":%" PRId64 ",\"delta\":%s,\"base\":", k ? "," : "",
				       in->step, in->is_delta ? "true" : "false");
				if (in->is_delta)
					printf("\"%s\"", in->base);
				else
					printf("null");
				printf(",\"bytes\":%" PRIu64 ",\"whole\":%zu,\"unchanged\":%zu,"
				       "\"patched\":%zu,\"rows_patched\":%" PRIu64 ",\"seconds\":%.3f}",
				       in->bytes, in->vars_whole, in->vars_unchanged, in->vars_patched,
				       in->rows_patched, in->seconds);
			}
			printf("]}\n");
		} else {
			printf("step %" PRId64 ": loss %.4f, accuracy %.3f over %" PRId64
			       " examples since step 0; this run: %" PRId64 " steps in %.1f s "
			       "on %d worker(s) x %d replica(s) (%s); latest checkpoint %s/ckpt-%" PRId64 "\n",
			       j.step, mean_loss((metrics){ 0 }, fin), accuracy((metrics){ 0 }, fin),
			       fin.examples, j.step - start, secs, j.W, j.R, device_name(so.device),
			       j.o.ckpt, j.step);
		}
	}

	dvar_manager_free(j.m);
	dvar_input_iterator_free(j.it);
	dvar_dataset_free(j.ds);
	for (int v = 0; v < 5; v++)
		dvar_variable_free(j.vars[v]);
	dvar_values_free(j.grads);
	dvar_sharded_variable_free(j.emb);
	for (int r = 0; r < j.R; r++)
		free(j.scratch[r].kernel), free(j.scratch[r].grad), free(j.scratch[r].pooled);
	free(j.scratch), free(j.batches), free(j.ids), free(j.rows), free(j.emb_delta), free(j.data);
	free(j.saves);
	live_strategy = NULL;
	dvar_strategy_free(j.s);
	return 0;
}
