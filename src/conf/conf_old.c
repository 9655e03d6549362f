// The legacy flat format of NanoMQ before 0.14 (`--old_conf`): one
// `key=value` per line. Each flat key is mapped onto its HOCON key and
// written into the configuration tree with the flat file's line, so the
// usual validation checks it (docs/compatibility.md §4).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/conf/ascii.h"
#include "src/conf/conf_int.h"

// Flat keys of NanoMQ's flat format that have no HOCON key: accepted
// without a warning and without effect. (Every other flat key is named by
// the schema row of its HOCON key, conf_key.flat.)
static const struct {
	const char *flat;
	const char *note;
} old_noop[] = {
	{ "auth_enable",
	    "accepted, no effect: authentication follows `allow_anonymous` and the password "
	    "list" },
};

#define N_NOOP (sizeof(old_noop) / sizeof(old_noop[0]))

// Returns true when the flat name of k is a prefix (it ends with '.').
static bool is_prefix(const conf_key *k)
{
	size_t n = k->flat != NULL ? strlen(k->flat) : 0;

	return n > 0 && k->flat[n - 1] == '.';
}

// Returns the schema row of a flat key (an exact name first, then the
// longest prefix followed by something), or NULL.
static const conf_key *old_find(const char *flat)
{
	const conf_key *best = NULL;

	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		if (k->flat != NULL && !is_prefix(k) && strcmp(flat, k->flat) == 0) {
			return k;
		}
	}
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		size_t          n = k->flat != NULL ? strlen(k->flat) : 0;
		if (is_prefix(k) && strncmp(flat, k->flat, n) == 0 && flat[n] != '\0'
		    && (best == NULL || n > strlen(best->flat))) {
			best = k;
		}
	}
	return best;
}

// Returns true when flat is a flat key accepted without effect.
static bool old_is_noop(const char *flat)
{
	for (size_t i = 0; i < N_NOOP; i++) {
		if (strcmp(flat, old_noop[i].flat) == 0) {
			return true;
		}
	}
	return false;
}

// Trims white space at both ends of s in place and returns it.
static char *trim(char *s)
{
	char *e;

	while (ascii_isspace((unsigned char)*s)) {
		s++;
	}
	e = s + strlen(s);
	while (e > s && ascii_isspace((unsigned char)e[-1])) {
		*--e = '\0';
	}
	return s;
}

// Returns the next item of a comma-separated list (cut out of the text in
// place and trimmed; empty items are skipped), or NULL at its end. *cur is
// where the rest of the list starts (NULL: the end); set it to the list
// before the first call.
static char *list_next(char **cur)
{
	while (*cur != NULL) {
		char *w     = *cur;
		char *comma = strchr(w, ',');
		if (comma != NULL) {
			*comma = '\0';
			*cur   = comma + 1;
		} else {
			*cur = NULL;
		}
		w = trim(w);
		if (*w != '\0') {
			return w;
		}
	}
	return NULL;
}

// Reads a file of at most HOCON_MAX_FILE_SIZE bytes. Returns a new
// NUL-terminated buffer, or NULL with a reason.
static char *slurp(const char *path, char *why, size_t whylen)
{
	FILE       *f = fopen(path, "r");
	struct stat st;
	char       *buf;
	size_t      n;

	if (f == NULL) {
		snprintf(why, whylen, "%s", strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)
	    || (unsigned long long)st.st_size > HOCON_MAX_FILE_SIZE) {
		snprintf(
		    why, whylen, "not a regular file of at most %u bytes", HOCON_MAX_FILE_SIZE);
		fclose(f);
		return NULL;
	}
	if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		snprintf(why, whylen, "out of memory");
		fclose(f);
		return NULL;
	}
	n = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	buf[n] = '\0';
	if (memchr(buf, '\0', n) != NULL) {
		snprintf(why, whylen, "NUL byte in the file");
		free(buf);
		return NULL;
	}
	return buf;
}

// Maps one flat line onto the tree. Returns 0, or -1 after an error.
static int old_line(
    hocon_doc *doc, conf_errors *errs, const char *path, int origin, int line, char *text)
{
	char           *eq = strchr(text, '=');
	char           *key;
	char           *value;
	const conf_key *m;
	const conf_key *target;
	int             how;
	char            hkey[400];
	char            buf[64];
	cJSON          *v = NULL;
	size_t          vl;

	if (eq == NULL) {
		conf_errors_add(errs, true, "%s:%d: expected key=value", path, line);
		return -1;
	}
	*eq   = '\0';
	key   = trim(text);
	value = trim(eq + 1);
	vl    = strlen(value);
	if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"') {
		value[vl - 1] = '\0';
		value++;
	}
	if (key[0] == '\0') {
		conf_errors_add(errs, true, "%s:%d: expected key=value", path, line);
		return -1;
	}
	if ((m = old_find(key)) == NULL) {
		if (!old_is_noop(key)) {
			conf_errors_add(errs, false, "%s:%d: %.200s: unknown flat key; ignored",
			    path, line, key);
		}
		return 0;
	}
	if (value[0] == '\0') {
		return 0; // empty: keep the default
	}
	if (is_prefix(m)) {
		snprintf(hkey, sizeof(hkey), "%s.%.300s", m->path, key + strlen(m->flat));
		target = conf_schema_find(hkey, NULL);
	} else {
		snprintf(hkey, sizeof(hkey), "%s", m->path);
		target = m;
	}
	how = target == NULL               ? CONF_FLAT_SAME
	    : target->type == CONF_T_FLAGS ? CONF_FLAT_LIST
	                                   : target->flat_how;
	switch (how) {
	case CONF_FLAT_KB:
		if (strspn(value, "0123456789") == strlen(value) && strlen(value) < 20) {
			snprintf(buf, sizeof(buf), "%sKB", value);
			v = cJSON_CreateString(buf);
		} else {
			v = cJSON_CreateString(value);
		}
		break;
	case CONF_FLAT_MILLI: {
		char *end;
		long  n = strtol(value, &end, 10);
		if (end == value || *end != '\0' || n < 0 || n > 1000000) {
			conf_errors_add(errs, true,
			    "%s:%d: %s: expected an integer in thousandths (1250 = 1.25), got "
			    "\"%.64s\"",
			    path, line, key, value);
			return -1;
		}
		v = cJSON_CreateNumber((double)n / 1000);
		break;
	}
	case CONF_FLAT_LIST:
		v = cJSON_CreateArray();
		for (char *cur = value, *w; v != NULL && (w = list_next(&cur)) != NULL;) {
			cJSON_AddItemToArray(v, cJSON_CreateString(w));
		}
		break;
	default:
		v = cJSON_CreateString(value);
		break;
	}
	if (hocon_set_path(doc, hkey, v, origin, line, HOCON_LOC_LOOSE) == NULL) {
		conf_errors_add(errs, true,
		    "%s:%d: %s: cannot be stored (out of memory or bad key)", path, line, key);
		return -1;
	}
	return 0;
}

// Returns true when the flat value of key in the tree reads as true.
static bool tree_true(hocon_doc *doc, const char *key)
{
	cJSON *n = hocon_get_path(doc, key);

	return n != NULL
	    && (cJSON_IsTrue(n)
	        || (cJSON_IsString(n)
	            && (strcmp(n->valuestring, "true") == 0 || strcmp(n->valuestring, "1") == 0)));
}

// forwards=a/#,b/# (a string): the array of forwards {local_topic = "a/#",
// remote_topic = ""}, ...
static void old_forward_list(hocon_doc *doc, cJSON *b, cJSON *fw, int origin)
{
	int    line = 0;
	cJSON *arr  = cJSON_CreateArray();
	char  *list = strdup(fw->valuestring);

	if (arr == NULL || list == NULL) {
		cJSON_Delete(arr);
		free(list);
		return;
	}
	(void)hocon_loc(doc, fw, NULL, &line, NULL, NULL);
	for (char *cur = list, *w; (w = list_next(&cur)) != NULL;) {
		cJSON *e = cJSON_CreateObject();
		if (e == NULL) {
			break;
		}
		cJSON_AddItemToObject(e, "local_topic", cJSON_CreateString(w));
		cJSON_AddItemToObject(e, "remote_topic", cJSON_CreateString(""));
		cJSON_AddItemToArray(arr, e);
		(void)hocon_set_loc(doc, e, origin, line, 0, HOCON_LOC_LOOSE, NULL);
	}
	free(list);
	hocon_remove_child(doc, b, fw);
	cJSON_AddItemToObject(b, "forwards", arr);
	(void)hocon_set_loc(doc, arr, origin, line, 0, HOCON_LOC_LOOSE, NULL);
}

// The lists of NanoMQ's flat bridge keys: `forwards.N.*` and
// `subscription.N.*` (N a number) are the elements of the arrays forwards
// and subscription, in the order of N. (The flat keys made objects with
// the keys "N".) An object with a key that is not a number is left for the
// validation to report.
static void old_lists(hocon_doc *doc, int origin)
{
	static const char *const lists[] = { "forwards", "subscription" };
	cJSON                   *bridges = hocon_get_path(doc, "bridges.mqtt");
	cJSON                   *b;

	if (!cJSON_IsObject(bridges)) {
		return;
	}
	cJSON_ArrayForEach(b, bridges)
	{
		if (!cJSON_IsObject(b)) {
			continue;
		}
		cJSON *fw = cJSON_GetObjectItemCaseSensitive(b, "forwards");
		if (cJSON_IsString(fw)) {
			// NanoMQ 0.13: forwards=a/#,b/# (each forwarded as it is).
			old_forward_list(doc, b, fw, origin);
		}
		for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
			cJSON *o = cJSON_GetObjectItemCaseSensitive(b, lists[i]);
			cJSON *e;
			bool   numbered = cJSON_IsObject(o) && o->child != NULL;
			int    line     = 0;
			cJSON_ArrayForEach(e, o)
			{
				const char *k = e->string;
				numbered      = numbered && k != NULL && k[0] != '\0'
				    && strspn(k, "0123456789") == strlen(k) && strlen(k) < 9;
			}
			if (!numbered) {
				continue;
			}
			(void)hocon_loc(doc, o, NULL, &line, NULL, NULL);
			cJSON *arr = cJSON_CreateArray();
			if (arr == NULL) {
				return;
			}
			// Smallest N first (a handful of elements: selection).
			while (o->child != NULL) {
				cJSON *min = o->child;
				cJSON_ArrayForEach(e, o)
				{
					if (atol(e->string) < atol(min->string)) {
						min = e;
					}
				}
				cJSON_DetachItemViaPointer(o, min);
				if (i == 0
				    && cJSON_GetObjectItemCaseSensitive(min, "remote_topic")
				        == NULL) {
					// An empty flat value is left out: "" keeps the
					// local topic.
					cJSON_AddItemToObject(
					    min, "remote_topic", cJSON_CreateString(""));
				}
				if (strcmp(lists[i], "subscription") == 0
				    && cJSON_GetObjectItemCaseSensitive(min, "remote_topic")
				        == NULL) {
					// NanoMQ 0.13: subscription.N.topic.
					cJSON *t = cJSON_GetObjectItemCaseSensitive(min, "topic");
					if (t != NULL) {
						cJSON_DetachItemViaPointer(min, t);
						cJSON_AddItemToObject(min, "remote_topic", t);
					}
				}
				cJSON_AddItemToArray(arr, min);
			}
			hocon_remove_child(doc, b, o);
			cJSON_AddItemToObject(b, lists[i], arr);
			(void)hocon_set_loc(doc, arr, origin, line, 0, HOCON_LOC_LOOSE, NULL);
		}
	}
}

// Reads the flat file at path into the tree of doc.
int conf_old_read(hocon_doc *doc, const char *path, conf_errors *errs)
{
	char  why[128];
	char *text = slurp(path, why, sizeof(why));
	int   origin;
	int   line = 0;
	int   rc   = 0;

	if (text == NULL) {
		conf_errors_add(errs, true, "%s: cannot read: %s", path, why);
		return -1;
	}
	if ((origin = hocon_origin_add(doc, path)) < 0) {
		conf_errors_add(errs, true, "%s: out of memory", path);
		free(text);
		return -1;
	}
	for (char *s = text; s != NULL;) {
		char *nl = strchr(s, '\n');
		char *t;
		if (nl != NULL) {
			*nl = '\0';
		}
		line++;
		t = trim(s);
		if (t[0] != '\0' && t[0] != '#'
		    && old_line(doc, errs, path, origin, line, t) != 0) {
			rc = -1;
		}
		s = nl != NULL ? nl + 1 : NULL;
	}
	free(text);
	old_lists(doc, origin);
	if (hocon_get_path(doc, "listeners.wss.bind") != NULL) {
		bool on = tree_true(doc, "listeners.ssl.enable")
		    && tree_true(doc, "listeners.ws.enable");
		hocon_set_path(doc, "listeners.wss.enable", cJSON_CreateBool(on), origin, 0, 0);
	}
	// In the flat format TLS and the HTTP server are off unless enabled.
	if (hocon_get_path(doc, "listeners.ssl") != NULL
	    && hocon_get_path(doc, "listeners.ssl.enable") == NULL) {
		hocon_set_path(doc, "listeners.ssl.enable", cJSON_CreateFalse(), origin, 0, 0);
	}
	if (hocon_get_path(doc, "http_server") != NULL
	    && hocon_get_path(doc, "http_server.enable") == NULL) {
		hocon_set_path(doc, "http_server.enable", cJSON_CreateFalse(), origin, 0, 0);
	}
	if (hocon_get_path(doc, "listeners.tcp") == NULL) {
		hocon_set_path(doc, "listeners.tcp", cJSON_CreateObject(), origin, 0, 0);
	}
	return rc;
}

// Writes the flat key table as Markdown.
int conf_old_markdown(FILE *out)
{
	fprintf(out, "| flat key | HOCON key | note |\n|---|---|---|\n");
	for (size_t i = 0; i < conf_schema_len; i++) {
		const conf_key *k = &conf_schema[i];
		const char     *note;
		if (k->flat == NULL) {
			continue;
		}
		note = k->flat_note != NULL   ? k->flat_note
		    : k->type == CONF_T_FLAGS ? "comma-separated"
		                              : "";
		if (is_prefix(k)) {
			fprintf(out, "| `%s*` | `%s.*` | %s |\n", k->flat, k->path, note);
		} else {
			fprintf(out, "| `%s` | `%s` | %s |\n", k->flat, k->path, note);
		}
	}
	for (size_t i = 0; i < N_NOOP; i++) {
		fprintf(out, "| `%s` | none | %s |\n", old_noop[i].flat, old_noop[i].note);
	}
	return ferror(out) ? -1 : 0;
}
