/*
 * commit.h - the group committer (DESIGN: many runs, one fenced statement).
 * An execution describes what it wants written as a commit: journal rows,
 * consumed signals and one outcome for the run. The committer thread gathers
 * the commits of many executions and writes them with one statement whose
 * every write joins cairn.shard_leases on (group, shard, owner, epoch), so a
 * runner that lost a shard writes nothing for it.
 *
 * Owns: the committer thread, its connection and its queue. A commit is
 * owned by whoever submitted it until it is done; a final commit belongs to
 * the committer, which hands it to on_final once it is written (or refused).
 */
#ifndef CAIRN_COMMIT_H
#define CAIRN_COMMIT_H
#include <stdint.h>

#include "buf.h"
#include "log.h"
#include "metrics.h"
#include "pgarr.h"
#include "seal.h"
#include "state.h"
#include "watchdog.h"

/* An execution's count given back (runs.claims, see CAIRN_POISON_AFTER):
 * by a hand-over or a refused end (the commit statement's unc), by a lost one
 * (SQL_REFUND), by a claim that did not execute (dispatch.c, SQL_UNCLAIM). */
#define GIVE_COUNT_BACK "claims = greatest(claims - 1, 0)"

/* One journal row to insert or update. */
typedef struct jrow {
	int seq;
	char *name;
	step_kind kind;
	step_status status;
	char *output, *error; /* JSON text / message, or NULL */
	int attempts;
	int64_t wake_ms, started_ms, finished_ms; /* Unix ms; 0: NULL */
} jrow;

/* What happens to the run and its messages. */
typedef enum commit_outcome {
	COMMIT_JOURNAL, /* rows and signals only: a flush while the run executes (progress), or,
	                   final, a hand-over (the claim is given back; the messages stay for the
	                   shard's next owner) */
	COMMIT_SUSPEND, /* status sleeping or waiting; claimed messages deleted; a wake message
	                   at at_ms unless it is 0 */
	COMMIT_FINISH,  /* status completed, failed or cancelled with output or error; every
	                   message of the run deleted */
	COMMIT_RETRY,   /* the run starts over as attempt `attempt`: the journal cut from
	                   retry_from on (and the signals consumed there given back), claimed
	                   messages deleted, its start at at_ms */
	COMMIT_DEFER,   /* status pending with error as the reason; the claimed messages (and
	                   start) are delivered again at at_ms */
	COMMIT_MOVE,    /* a run of a workflow no worker here serves goes to group move_to,
	                   where a live worker serves it: the run (status pending, its claim
	                   given back) and all its messages move, still due, and the new
	                   shard's owner is woken after the commit */
	COMMIT_DISCARD, /* a late message for a finished run: delete the claimed messages */
	COMMIT_MARK,    /* an execution starts: count it (runs.claims) before any code of the
	                   run runs, so a run that keeps killing its worker is recognised */
	/* On the marker too, of runs a claim counted while they wait in the
	 * queue (migration 0018): */
	COMMIT_START,     /* the runner's queued runs up to `upto` start: their counts hold */
	COMMIT_START_RUN, /* this queued run starts ahead of runs numbered before it: its count
	                     holds, no longer numbered */
	COMMIT_UNQUEUE,   /* a queued run will not start here: its count given back */
	COMMIT_UNCLAIM,   /* an execution handed over with nothing new: its mark is given
	                     back; the messages stay */
} commit_outcome;

/* The run a commit writes for, and the lease its writes are fenced by. */
typedef struct commit_run {
	int64_t id;
	const char *group; /* name; outlives the commit */
	int shard;
	int64_t owner, epoch;
	const int64_t *msgs; /* the claimed messages (MSG_START_ID: the run's start);
	                        outlive the commit */
	int nmsgs;
	int attempt;    /* the attempt that executed */
	int64_t parent; /* the run that started it as a child (told when it finishes), or 0 */
	int64_t chain;  /* the first run of its chain (cairn_continue_as_new): the child its
	                   parent knows; 0: the run itself */
	/* For the logs and metrics of the run's end (commit.c fails a run whose
	 * writes the database refuses): its workflow, which outlives the
	 * commit, and that workflow's metrics slot; either may be NULL. */
	const char *workflow;
	metrics_flow *mx;
} commit_run;

/* A child run the commit inserts (cairn_child_start): under an id taken
 * from runs' sequence beforehand, keyed cairn.child:RUN:SEQ, in group (the
 * one that serves its workflow; NULL: the run's own), due at once. */
typedef struct commit_child {
	int64_t id;
	int seq; /* of its start in the run's journal */
	int shard;
	char *workflow, *key, *input; /* input: JSON text */
	char *group;
	char tp[56]; /* its traceparent: of the call that starts it (trace.h); "": none */
} commit_child;

/* A wait for children the run suspends in (cairn_child_wait and the like):
 * want of children[] must end before the run is woken. Those whose end the
 * run took before are not among them (nor counted in want). */
typedef struct commit_await {
	int seq;
	int want;
	int64_t *children;
	int n; /* 0: no wait */
} commit_await;

typedef struct commit {
	commit_run run;
	commit_outcome outcome;
	run_status status; /* SUSPEND and FINISH */
	char *output;      /* FINISH: JSON text */
	char *next_input;  /* FINISH: the input of the run that continues it as new (JSON
	                      text), or NULL: none */
	int64_t next_id;   /* FINISH with next_input: that run's id */
	char *error;       /* FINISH, RETRY, DEFER: a message, or NULL */
	char *move_to;     /* MOVE: the group the run goes to */
	int attempt;       /* the run's attempt once written */
	int64_t at_ms;     /* SUSPEND, RETRY, DEFER: Unix ms */
	int64_t upto;      /* START: a runs.queued_seq */
	int retry_from;    /* RETRY: the journal is cut from this seq on */
	jrow *rows;
	int nrows, caprows;
	int64_t *sig_ids; /* signals consumed, and the seq that consumed each */
	int *sig_seqs;
	int nsig, capsig;
	commit_child *kids; /* children to insert */
	int nkids, capkids;
	commit_await await; /* SUSPEND: the wait for children it suspends in */

	/* Filled by the committer. */
	int ok;               /* written (the fence held) */
	int cancel_requested; /* the run was cancelled meanwhile */
	int woken;            /* its wait for children was met as it began: it is due again */
	int done;
	int final; /* submitted with committer_submit_final */
	void *tag; /* the submitter's, handed back by on_final */
	struct commit *next;
} commit;

commit *commit_new(const commit_run *run); /* NULL when out of memory */
void commit_free(commit *c);
/* Adds a row (its strings copied) / a consumed signal: 0 or -CAIRN_ENOMEM. */
int commit_add_row(commit *c, const jrow *r);
int commit_add_signal(commit *c, int64_t id, int seq);
/* Adds a child to insert (its strings copied): 0 or -CAIRN_ENOMEM. */
int commit_add_child(commit *c, const commit_child *k);
/* Sets the wait for children the run suspends in (children copied): 0 or
 * -CAIRN_ENOMEM. */
int commit_set_await(commit *c, int seq, int want, const int64_t *children, int n);
/* Drops the rows, consumed signals, children and wait at seq >= from (a
 * run retry starts over there). */
void commit_truncate(commit *c, int from);

/*
 * Whether c may join the n commits of batch: not when its run is the
 * parent or a child of one of theirs. A parent's commit and its child's in
 * one statement would both write the child's row (a cancelled parent asks
 * its children to cancel), of which PostgreSQL keeps the first update, or
 * miss each other (a wait for children counts the ends of children that
 * committed before it, cairn.children_sync, and a child's end in the same
 * statement has not). The committer ends a batch before such a commit,
 * which opens the next one.
 */
int commit_batch_fits(commit *const *batch, int n, const commit *c);

/*
 * The statement's parameters, one X-macro list: the name of each :slot in
 * the SQL, in $n order. commit_encode fills them from a batch; pure, so it
 * is tested without a database.
 */
/* clang-format off */
#define COMMIT_SLOTS(X)                                                             \
	X(b_run) X(b_group) X(b_shard) X(b_owner) X(b_epoch)                        \
	X(j_run) X(j_seq) X(j_name) X(j_kind) X(j_status) X(j_output) X(j_error)    \
	X(j_attempts) X(j_wake) X(j_started) X(j_finished)                          \
	X(u_run) X(u_status) X(u_output) X(u_error) X(u_attempt) X(u_finished)      \
	X(u_start) X(u_version) X(u_cut)                                            \
	X(del_msg) X(del_run)                                                       \
	X(new_run) X(new_kind) X(new_at)                                            \
	X(sig_id) X(sig_seq) X(sig_run)                                             \
	X(kn_run) X(kn_id) X(kn_workflow) X(kn_key) X(kn_shard) X(kn_group)         \
	X(kn_input) X(kn_tp)                                                        \
	X(reset_run) X(reset_from)                                                  \
	X(defer_msg) X(defer_at)                                                    \
	X(prog_run) X(unclaim_run) X(refund_run)                                    \
	X(kid_run) X(kid_parent) X(kid_name) X(kid_payload) X(kid_child)            \
	X(aw_run) X(aw_seq) X(aw_want) X(awc_run) X(awc_child)                      \
	X(can_run)                                                                  \
	X(ev_run) X(ev_key) X(ev_value) X(ev_seq)                                   \
	X(mv_run) X(mv_group)                                                       \
	X(cont_run) X(cont_id) X(cont_input) X(cont_taken)
/* clang-format on */

#define COMMIT_SLOT_ENUM(name) SLOT_##name,
enum commit_slot { COMMIT_SLOTS(COMMIT_SLOT_ENUM) COMMIT_NSLOTS };
#undef COMMIT_SLOT_ENUM

extern const char *const COMMIT_SLOT_NAMES[COMMIT_NSLOTS];

typedef struct commit_params {
	const seal_keys *keys;    /* the values of runs and steps are sealed with (seal.h) */
	const char *code_version; /* recorded on runs that have none (NULL: none) */
	pgarr slot[COMMIT_NSLOTS];
	const char *values[COMMIT_NSLOTS]; /* for PQexecPrepared; owned by slot[] */
} commit_params;

/*
 * The statement is written in parts (the journal's insert, the run's update,
 * the messages' deletion, ...), each reading its own slots; a batch needs
 * only the parts whose slots it fills. A set of parts is a bit mask.
 */
#define COMMIT_NPARTS    15
#define COMMIT_ALL_PARTS ((1u << COMMIT_NPARTS) - 1)
/* The parts whose slots p fills. */
unsigned commit_parts(const commit_params *p);
/* The statement of a set of parts with $n for their slots, in slot order:
 * 0, or the error of sqlparam_bind. */
int commit_statement(unsigned parts, buf *sql, buf *err);
/* commit_statement of one part (in_part: a database with parts), whose key
 * is the parameter after the slots'. */
int commit_statement_part(unsigned parts, int in_part, buf *sql, buf *err);
/* Whether the statement of parts tells parents of their children's ends:
 * of one part, it then takes the parents' parts (commit_parent_parts) after
 * the part's key. */
int commit_tells_parents(unsigned parts);
/* Appends to out the keys of the parts of the parents the children of
 * batch (commits of one part) tell, and the part's own (st: the database's
 * parts); every part's for a parent made before ids carried their shard. */
struct db_settings;
void commit_parent_parts(commit *const *batch, int n, const struct db_settings *st, pgarr *out);
/* The statement that locks the fence of one part before its commit's
 * statement, in the same transaction ($1 the part's key, $2 and $3 the
 * batch's b_group and b_shard). */
const char *commit_sql_fence_part(void);
/* The values of p for the statement of parts, in its $n order: their
 * number. */
int commit_values(const commit_params *p, unsigned parts, const char *values[COMMIT_NSLOTS]);
/* Encodes a batch, outputs and errors sealed with keys (NULL: plaintext),
 * code_version (NULL: none) for the runs it updates that have none:
 * 0 or -CAIRN_ENOMEM. Free with commit_params_free. */
int commit_encode(commit *const *batch, int n, const seal_keys *keys, const char *code_version,
                  commit_params *p);
void commit_params_free(commit_params *p);

typedef struct committer committer;

typedef struct committer_env {
	const char *conninfo;
	const char *app_name; /* application_name of its connection */
	/* 1: commits do not wait for the disk (synchronous_commit off). Only
	 * for writes that a worker crash cannot lose and a database crash may:
	 * the execution marks. */
	int async_commit;
	/* The commit connection's statement_timeout; lock waits end at half. */
	int64_t statement_timeout_ms;
	/* Stamped while waiting for work and after every statement: stale only
	 * while a statement goes unanswered past its timeout (NULL: none). */
	watch *loop;
	const logger *log;
	metrics *m;
	const seal_keys *keys;    /* outputs and errors are sealed with (NULL: plaintext) */
	const char *code_version; /* CAIRN_CODE_VERSION (NULL: none) */
	/* Called on the committer thread for a final commit once it is done;
	 * the callee owns c from then on. */
	void (*on_final)(void *arg, commit *c);
	/* Called on the committer thread after a batch that started children
	 * (they are due): may be NULL. */
	void (*on_children)(void *arg);
	void *arg;
} committer_env;

/* Starts the committer thread; 0, or -CAIRN_ENOMEM (nothing started). */
int committer_start(const committer_env *env, committer **out);
/* Writes c and waits: 0 once written, -CAIRN_ESTOP when the fence or the
 * database refused it (the run must stop). Sets c->cancel_requested. */
int committer_wait(committer *k, commit *c);
/* Hands over the final commit of an execution; on_final gets it back. */
void committer_submit_final(committer *k, commit *c);
/* Writes what is queued, then joins the thread. */
void committer_stop(committer *k);
void committer_free(committer *k);
#endif
