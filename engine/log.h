/*
 * log.h - one line per event on stderr: logfmt (ts=... level=info msg="..."
 * key=value) or JSON lines. Thread-safe: each line is one write().
 */
#ifndef CAIRN_LOG_H
#define CAIRN_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };
enum log_format { LOG_LOGFMT = 0, LOG_JSON = 1 };

typedef struct logger {
	int level;
	int format;
	int fd; /* 2 unless a test says otherwise */
} logger;

/* Logs msg with NULL-terminated key, value string pairs. */
void log_kv(const logger *lg, int level, const char *msg, ...) __attribute__((sentinel));
int log_parse_level(const char *s, int *out);
int log_parse_format(const char *s, int *out);
#endif
