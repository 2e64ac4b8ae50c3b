/*
 * dvar/attrs.h - the attributes a checkpoint records on its variables
 * (dvar_reader_var_attr): every key and every value dvar writes or reads,
 * defined once. docs/FORMAT.md, "Attributes", gives their meaning.
 */
#ifndef DVAR_ATTRS_H
#define DVAR_ATTRS_H

/** What the variable is: one of DVAR_KIND_*. */
#define DVAR_STORE_ATTR_KIND "kind"
#define DVAR_KIND_MIRRORED "mirrored"         /**< ON_WRITE: its primary is saved */
#define DVAR_KIND_SYNC_ON_READ "sync_on_read" /**< ON_READ: its aggregate is saved */
#define DVAR_KIND_PLAIN "plain"               /**< a plain tensor, or a one-shard variable */
#define DVAR_KIND_SHARDED "sharded"           /**< saved as one slice per shard */
#define DVAR_KIND_ITERATOR "iterator"         /**< an input iterator's position table */

/** A distributed variable's synchronization: DVAR_SYNC_NAME_*. */
#define DVAR_STORE_ATTR_SYNCHRONIZATION "synchronization"
#define DVAR_SYNC_NAME_ON_WRITE "ON_WRITE"
#define DVAR_SYNC_NAME_ON_READ "ON_READ"

/** A distributed variable's aggregation: DVAR_AGG_NAME_*. */
#define DVAR_STORE_ATTR_AGGREGATION "aggregation"
#define DVAR_AGG_NAME_NONE "NONE"
#define DVAR_AGG_NAME_SUM "SUM"
#define DVAR_AGG_NAME_MEAN "MEAN"
#define DVAR_AGG_NAME_ONLY_FIRST_REPLICA "ONLY_FIRST_REPLICA"

/** Set to DVAR_REPLICA_CHECK_MISMATCH when mirrored replicas differed and the
 *  primary was saved anyway (DVAR_SAVE_ALLOW_REPLICA_MISMATCH); absent otherwise. */
#define DVAR_STORE_ATTR_REPLICA_CHECK "replica_check"
#define DVAR_REPLICA_CHECK_MISMATCH "mismatch"

/** On an input iterator's entry (kind "iterator"): the names of its int64
 *  table's columns, comma-separated (docs/INPUT.md, "Iterators in
 *  checkpoints"). */
#define DVAR_STORE_ATTR_ITERATOR_COLUMNS "columns"

/** A sharded variable's shard count, decimal: "4". Absent with one shard. */
#define DVAR_SHARDING_ATTR_SHARDS "shards"
/** How its rows are laid out over the shards: DVAR_LAYOUT_DIV. */
#define DVAR_SHARDING_ATTR_LAYOUT "layout"
/** Shard i holds rows [offsets[i], offsets[i+1]) of TensorFlow's div rule. */
#define DVAR_LAYOUT_DIV "div"

#endif
