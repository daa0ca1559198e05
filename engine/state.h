/*
 * state.h - the states and kinds cairn stores as text: run status, step
 * status, step kind and message kind. Each is one X-macro list that
 * generates the enum and its table of names, so code compares enums and
 * the text lives in one place. Rows are parsed once, where they are read.
 * Pure: no I/O.
 */
#ifndef CAIRN_STATE_H
#define CAIRN_STATE_H

#define RUN_STATUS_MAP(X)                                                                          \
	X(RUN_PENDING, "pending")                                                                  \
	X(RUN_RUNNING, "running")                                                                  \
	X(RUN_SLEEPING, "sleeping")                                                                \
	X(RUN_WAITING, "waiting")                                                                  \
	X(RUN_COMPLETED, "completed")                                                              \
	X(RUN_FAILED, "failed")                                                                    \
	X(RUN_CANCELLED, "cancelled")

/* timed_out: a signal wait whose deadline passed before the signal came. */
#define STEP_STATUS_MAP(X)                                                                         \
	X(STEP_COMPLETED, "completed")                                                             \
	X(STEP_FAILED, "failed")                                                                   \
	X(STEP_RETRYING, "retrying")                                                               \
	X(STEP_WAITING, "waiting")                                                                 \
	X(STEP_TIMED_OUT, "timed_out")

#define STEP_KIND_MAP(X)                                                                           \
	X(KIND_STEP, "step")                                                                       \
	X(KIND_SLEEP, "sleep")                                                                     \
	X(KIND_SIGNAL, "signal")                                                                   \
	X(KIND_NOW, "now")                                                                         \
	X(KIND_RANDOM, "random")                                                                   \
	X(KIND_CHILD, "child")                                                                     \
	X(KIND_SEND, "send")                                                                       \
	X(KIND_ENQUEUE, "enqueue")                                                                 \
	X(KIND_EVENT, "event")                                                                     \
	X(KIND_PATCH, "patch")                                                                     \
	X(KIND_CHILDREN, "children")

/* The signal a child's end sends its parent: this prefix and the child's
 * id; its payload {"status", "output", "error"}. */
#define CHILD_SIGNAL_PREFIX "cairn.child:"
/* The name a durable call publishing an event is journaled under: this
 * prefix and the event's key. */
#define EVENT_STEP_PREFIX "event:"

#define MSG_KIND_MAP(X)                                                                            \
	X(MSG_SIGNAL, "signal")                                                                    \
	X(MSG_WAKE, "wake")                                                                        \
	X(MSG_CANCEL, "cancel")

#define STATE_ENUM(id, name) id,
typedef enum run_status { RUN_STATUS_MAP(STATE_ENUM) RUN_STATUS_COUNT } run_status;
typedef enum step_status { STEP_STATUS_MAP(STATE_ENUM) STEP_STATUS_COUNT } step_status;
typedef enum step_kind { STEP_KIND_MAP(STATE_ENUM) STEP_KIND_COUNT } step_kind;
typedef enum msg_kind { MSG_KIND_MAP(STATE_ENUM) MSG_KIND_COUNT } msg_kind;
/* A run's start is not a message but a column of the run (runs.start_at);
 * the claim names it with this message id, which no message has. */
#define MSG_START_ID 0
#undef STATE_ENUM

/* The stored name of a value ("?" for one out of range). */
const char *run_status_name(run_status s);
const char *step_status_name(step_status s);
const char *step_kind_name(step_kind k);
const char *msg_kind_name(msg_kind k);

/* Parses a stored name: 0, or -CAIRN_EINVAL for a name that is not one. */
int run_status_parse(const char *s, run_status *out);
int step_status_parse(const char *s, step_status *out);
int step_kind_parse(const char *s, step_kind *out);

/* completed, failed or cancelled. */
int run_status_finished(run_status s);
/* A journal entry that a run retry keeps: completed, or a signal wait that
 * timed out (both are results the replay returns). */
int step_status_settled(step_status s);
#endif
