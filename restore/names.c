/*
 * restore/names.c - TensorFlow's variable names as exports rewrite them:
 * TF2's short names (dvar_short_name) and which names are optimizer slots.
 */
#include <stdlib.h>
#include <string.h>

#include "restore/restore.h"

#define ATTRS "/.ATTRIBUTES/"
#define VALUE ATTRS "VARIABLE_VALUE"
#define SLOT "/.OPTIMIZER_SLOT/"

char *dvar_short_name(const char *name)
{
	size_t len = strlen(name), vlen = strlen(VALUE);
	char *out = malloc(len + 1), *o = out;

	if (!out)
		return NULL;
	if (len > vlen && strcmp(name + len - vlen, VALUE) == 0)
		len -= vlen;
	for (size_t i = 0; i < len;) {
		if (strncmp(name + i, SLOT, strlen(SLOT)) == 0 && i + strlen(SLOT) <= len) {
			*o++ = '@';
			i += strlen(SLOT);
		} else if (strncmp(name + i, ATTRS, strlen(ATTRS)) == 0 && i + strlen(ATTRS) <= len) {
			*o++ = ':';
			i += strlen(ATTRS);
		} else {
			*o++ = name[i++];
		}
	}
	*o = '\0';
	return out;
}

/* The slot names of TF1's optimizers (slot_creator: "<var>/<Optimizer>", the
 * second slot "<Optimizer>_1", another instance "<Optimizer>_<n>"). */
static const char *const tf1_slots[] = {
	"Adam", "Momentum", "RMSProp", "Adagrad", "AdagradDA", "ProximalAdagrad",
	"Ftrl", "Adadelta", "Adamax", "Nadam",
};

int dvar_is_optimizer_slot(const char *name)
{
	if (strstr(name, SLOT))
		return 1;
	const char *last = strrchr(name, '/');
	if (!last || last == name)
		return 0;
	last++;
	for (size_t k = 0; k < sizeof(tf1_slots) / sizeof(tf1_slots[0]); k++) {
		size_t n = strlen(tf1_slots[k]);
		if (strncmp(last, tf1_slots[k], n) != 0)
			continue;
		const char *p = last + n;
		if (*p == '\0')
			return 1;
		if (*p++ != '_' || *p == '\0')
			continue;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p == '\0')
			return 1;
	}
	return 0;
}
