/*
 * core/abi.c - the sizes of the public structs as this build lays them out,
 * for bindings that mirror them (the Python package's ctypes structures):
 * a binding checks its own layout against these at load time, so a header
 * change it missed fails loudly instead of reading garbage.
 */
#include <string.h>

#include "dvar/format.h"
#include "dvar/restore.h"

/* Every struct a binding may mirror, by its C name. */
#define DVAR_ABI_TYPE(t) { #t, sizeof(t) }
static const struct {
	const char *name;
	size_t size;
} abi_types[] = {
	DVAR_ABI_TYPE(dvar_error),          DVAR_ABI_TYPE(dvar_shape),
	DVAR_ABI_TYPE(dvar_slice),          DVAR_ABI_TYPE(dvar_slice_walk),
	DVAR_ABI_TYPE(dvar_write_options),  DVAR_ABI_TYPE(dvar_read_options),
	DVAR_ABI_TYPE(dvar_var_info),       DVAR_ABI_TYPE(dvar_mapping),
	DVAR_ABI_TYPE(dvar_bad_chunk),      DVAR_ABI_TYPE(dvar_root_entry),
	DVAR_ABI_TYPE(dvar_callbacks),      DVAR_ABI_TYPE(dvar_shard_count),
	DVAR_ABI_TYPE(dvar_reshard_options), DVAR_ABI_TYPE(dvar_export_options),
	DVAR_ABI_TYPE(dvar_import_source),  DVAR_ABI_TYPE(dvar_import_options),
	DVAR_ABI_TYPE(dvar_read_request),   DVAR_ABI_TYPE(dvar_diff_options),
	DVAR_ABI_TYPE(dvar_var_diff),       DVAR_ABI_TYPE(dvar_write_request),
};

size_t dvar_abi_sizeof(const char *type_name)
{
	if (!type_name)
		return 0;
	for (size_t k = 0; k < sizeof(abi_types) / sizeof(abi_types[0]); k++) {
		if (strcmp(abi_types[k].name, type_name) == 0)
			return abi_types[k].size;
	}
	return 0;
}
