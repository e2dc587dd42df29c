/* The site pool's compiled core: a site's configuration (priority with fairshare,
 * throttles, CURRENTHIGHEST reservations to a depth, FIRSTFIT or BESTFIT backfill)
 * on one processor pool.  grid_tasks/maui/lean.py (the lean pass on the general
 * engine) and the general pass stay the reference; pool_site.py is the Python side.
 *
 * Why C: every iteration re-ranks the whole idle queue (queue time and expansion
 * factor move with the clock, fairshare with every accrual), charges every running
 * job to its credentials and remakes the reservations; in Python the interpreter's
 * per-operation overhead is the whole cost.  Every number here comes from the same
 * floating-point operations, in the same order, as the Python code (Python's float
 * floor division included), so the decisions are identical (tests/maui/test_site_pool.py).
 *
 * Jobs live in slots (ints handed to Python); credentials ((kind, name) pairs) too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef Py_ssize_t idx;

enum { IDLE_READY = 1, IDLE_PARKED = 2, RUNNING = 3, GONE = 4 };
enum { SOFT = 0, HARD = 1 };
enum { SUB_QUEUETIME = 0, SUB_XFACTOR = 1, SUB_FS = 2 };  /* SUB_FS + kind */
#define KINDS 5
#define MAXSUBS 8

typedef struct {
    int kind;
    int has_target, tmode;          /* tmode 0 plain, 1 floor (+), 2 ceiling (- or ^) */
    double tval;
    int has_lim[4]; double lim[4][2]; int any_lim;
    int has_maxi; double maxi; long seen;
    double used[4];
    long long *tag; double *val;    /* fairshare windows, a ring of fs_depth + 1 */
    double pct; unsigned long pct_gen;
} Cred;

typedef struct {
    double submit, wall, procs, priority, metric, rate;
    long long seq; long tasks, ppt;
    int creds[KINDS], ncred;        /* in CREDENTIAL_KINDS order, None names left out */
    int bykind[KINDS];              /* credential per kind, -1 for None */
    double *fixed;                  /* per component: its weighted value, NaN if it moves */
    int state, ever_fit, reserved, ready_pos;
    double rstart, start, end, accounted, score;
} JobS;

typedef struct { double cw; int fixed, nsub; int code[MAXSUBS]; double sw[MAXSUBS]; } Comp;
typedef struct { double start, end, amount; } HoldS;
typedef struct { int slot, backfill; } Started;
typedef struct { int slot; double t; } Created;

typedef struct {
    PyObject_HEAD
    double *t, *v; idx n, cap;                      /* the free-processor profile */
    JobS *jobs; idx njobs, capjobs;
    Cred *creds; idx ncreds, capcreds;
    int *ready; idx nready, capready;               /* idle jobs that may ever start */
    int *running; idx nrunning, caprunning;         /* in start order */
    int *reserved; idx nreserved, capreserved;      /* job reservations, in creation order */
    int *order; idx norder, caporder;
    int *picks; idx cappd;                          /* picks, then the deferred jobs */
    HoldS *holds; idx nholds, capholds;
    Comp *comps; int ncomp;
    long long *ttag; double *tval;                  /* fairshare window totals (ring) */
    double size, cap_now, depth;
    int at_once, fifo, fs_on, fs_depth, throttles;
    double fs_interval, fs_decay;
    long parked_prio, ready_prio;
    unsigned long gen;
    double now;
    /* results of one iteration */
    Started *r_st; idx nst, capst;
    Created *r_cr; idx ncr, capcr;
    int *r_rel; idx nrel, caprel;
    long considered, throttled;
} Core;

static int grow(void **p, idx *cap, idx need, size_t size) {
    if (need <= *cap) return 0;
    idx c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * size);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q; *cap = c;
    return 0;
}

#define PUSH(arr, n, cap, x) (grow((void **)&(arr), &(cap), (n) + 1, sizeof(*(arr))) < 0 ? -1 : ((arr)[(n)++] = (x), 0))

/* -- Python's float arithmetic where C's differs ------------------------------------ */
static double py_floordiv(double vx, double wx) {   /* CPython's float // */
    double mod = fmod(vx, wx), div = (vx - mod) / wx, floordiv;
    if (mod) { if ((wx < 0) != (mod < 0)) div -= 1.0; }
    if (div) { floordiv = floor(div); if (div - floordiv > 0.5) floordiv += 1.0; }
    else floordiv = copysign(0.0, vx / wx);
    return floordiv;
}
static double py_min(double a, double b) { return b < a ? b : a; }   /* min(a, b) */
static double py_max(double a, double b) { return b > a ? b : a; }   /* max(a, b) */

/* -- the profile (profile.py StepProfile) ------------------------------------------ */
static idx bis_right(const double *a, idx lo, idx hi, double x) {
    while (lo < hi) { idx m = (lo + hi) / 2; if (x < a[m]) hi = m; else lo = m + 1; }
    return lo;
}
static idx bis_left(const double *a, idx lo, idx hi, double x) {
    while (lo < hi) { idx m = (lo + hi) / 2; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
}

static idx prof_split(Core *c, double x) {
    idx i = bis_right(c->t, 0, c->n, x) - 1;
    if (c->t[i] == x) return i;
    idx cap = c->cap;
    if (grow((void **)&c->t, &cap, c->n + 1, sizeof(double)) < 0) return -1;
    cap = c->cap;
    if (grow((void **)&c->v, &cap, c->n + 1, sizeof(double)) < 0) return -1;
    c->cap = cap;
    memmove(c->t + i + 2, c->t + i + 1, (size_t)(c->n - i - 1) * sizeof(double));
    memmove(c->v + i + 2, c->v + i + 1, (size_t)(c->n - i - 1) * sizeof(double));
    c->t[i + 1] = x; c->v[i + 1] = c->v[i]; c->n++;
    return i + 1;
}

static int prof_add(Core *c, double start, double end, double delta) {
    if (end <= start || delta == 0) return 0;
    idx i = prof_split(c, start);
    if (i < 0) return -1;
    idx j = c->n;
    if (end < INFINITY) { j = prof_split(c, end); if (j < 0) return -1; }
    for (idx k = i; k < j; k++) c->v[k] += delta;
    return 0;
}

static double prof_at(Core *c, double x) { return c->v[bis_right(c->t, 0, c->n, x) - 1]; }

static double prof_min_over(Core *c, double start, double end) {
    idx i = bis_right(c->t, 0, c->n, start) - 1;
    double m = c->v[i];
    for (i++; i < c->n && c->t[i] < end; i++) if (c->v[i] < m) m = c->v[i];
    return m;
}

static double prof_earliest(Core *c, double start, double duration, double need) {
    idx n = c->n, i = bis_right(c->t, 0, n, start) - 1;
    double x = start;
    for (;;) {
        double end = x + duration;
        idx k = i; int ok = 1;
        while (k < n && (k == i || c->t[k] < end)) {
            if (c->v[k] < need) { ok = 0; break; }
            k++;
        }
        if (ok) return x;
        if (k + 1 >= n) return INFINITY;
        i = k + 1; x = c->t[i];
    }
}

static void prof_prune(Core *c, double now) {
    idx i = bis_right(c->t, 0, c->n, now) - 1, m = 1;
    c->v[0] = c->v[i]; c->t[0] = -INFINITY;
    for (idx k = i + 1; k < c->n; k++)
        if (c->v[k] != c->v[m - 1]) { c->t[m] = c->t[k]; c->v[m] = c->v[k]; m++; }
    c->n = m;
}

/* lean.curve_free: the one-node free-processors curve at w */
static double curve_free(Core *c, double now, double w) {
    idx i = bis_right(c->t, 0, c->n, now) - 1;
    double low = py_max(0.0, py_min(c->v[i], c->cap_now));
    for (idx k = i + 1; k < c->n; k++) {
        if (!(c->t[k] - now < w)) break;
        double v = c->v[k];
        if (v < low) low = py_max(v, 0.0);
    }
    return low;
}

/* -- fairshare (priority.py Fairshare) --------------------------------------------- */
static void ring_add(Core *c, long long *tag, double *val, long long w, double amount) {
    idx d = c->fs_depth + 1, k = (idx)(((w % d) + d) % d);
    if (tag[k] != w) {
        if (tag[k] > w) return;     /* a window older than any percent will read again */
        tag[k] = w; val[k] = 0.0;
    }
    val[k] = val[k] + amount;
}

static double ring_get(Core *c, const long long *tag, const double *val, long long w) {
    idx d = c->fs_depth + 1, k = (idx)(((w % d) + d) % d);
    return tag[k] == w ? val[k] : 0.0;
}

static void fs_add(Core *c, JobS *j, double procs, double start, double end) {
    double width = c->fs_interval, t = start;
    while (t < end) {
        long long w = (long long)py_floordiv(t, width);
        double upto = py_min(end, (double)(w + 1) * width);
        double amount = procs * (upto - t);
        ring_add(c, c->ttag, c->tval, w, amount);
        for (int i = 0; i < j->ncred; i++) {
            Cred *cr = &c->creds[j->creds[i]];
            ring_add(c, cr->tag, cr->val, w, amount);
        }
        t = upto;
    }
}

static double fs_percent(Core *c, Cred *cr, double now) {
    if (cr->pct_gen == c->gen) return cr->pct;
    long long current = (long long)py_floordiv(now, c->fs_interval);
    double mine = 0.0, total = 0.0;
    for (int i = 0; i < c->fs_depth; i++) {
        double factor = pow(c->fs_decay, (double)i);
        mine += factor * ring_get(c, cr->tag, cr->val, current - i);
        total += factor * ring_get(c, c->ttag, c->tval, current - i);
    }
    cr->pct = total > 0 ? 100.0 * mine / total : 0.0;
    cr->pct_gen = c->gen;
    return cr->pct;
}

static double fs_delta(Core *c, int cred, double now) {
    if (!c->fs_on || cred < 0) return 0.0;
    Cred *cr = &c->creds[cred];
    if (!cr->has_target) return 0.0;
    double diff = cr->tval - fs_percent(c, cr, now);
    if (cr->tmode == 1) return py_max(diff, 0.0);
    if (cr->tmode == 2) return py_min(diff, 0.0);
    return diff;
}

static void accrue(Core *c, double now) {
    for (idx r = 0; r < c->nrunning; r++) {
        JobS *j = &c->jobs[c->running[r]];
        double since = j->accounted, upto = py_min(now, j->end);
        if (upto > since) { fs_add(c, j, j->rate, since, upto); j->accounted = upto; }
    }
}

/* -- throttles (throttle.py Throttle) ---------------------------------------------- */
static int allows(Core *c, JobS *j, int level) {
    double extra[4] = {1, j->procs, j->procs * j->wall, 1};
    for (int i = 0; i < j->ncred; i++) {
        Cred *cr = &c->creds[j->creds[i]];
        if (!cr->any_lim) continue;
        for (int k = 0; k < 4; k++)
            if (cr->has_lim[k] && cr->used[k] + extra[k] > cr->lim[k][level]) return 0;
    }
    return 1;
}

static int idle_allowed(Core *c, JobS *j) {
    int any = 0;
    for (int i = 0; i < j->ncred; i++) {
        Cred *cr = &c->creds[j->creds[i]];
        if (cr->has_maxi) { any = 1; if ((double)cr->seen >= cr->maxi) return 0; }
    }
    if (any)
        for (int i = 0; i < j->ncred; i++) if (c->creds[j->creds[i]].has_maxi) c->creds[j->creds[i]].seen++;
    return 1;
}

static void apply(Core *c, JobS *j, double seconds, int sign) {
    if (!c->throttles) return;
    for (int i = 0; i < j->ncred; i++) {
        double *u = c->creds[j->creds[i]].used;
        u[0] += sign; u[1] += sign * j->procs; u[2] += (sign * j->procs) * seconds; u[3] += sign;
    }
}

/* -- ranking (ranking.py Ranking) ---------------------------------------------------- */
static double score(Core *c, JobS *j, double now) {
    double total = 0.0;
    for (int k = 0; k < c->ncomp; k++) {
        Comp *cp = &c->comps[k];
        if (cp->fixed) { total += j->fixed[k]; continue; }
        double part = 0.0;
        for (int s = 0; s < cp->nsub; s++) {
            double value, queued = py_max(0.0, now - j->submit);
            int code = cp->code[s];
            if (code == SUB_QUEUETIME) value = queued / 60.0;
            else if (code == SUB_XFACTOR) value = (queued + j->wall) / j->wall;
            else value = fs_delta(c, j->bykind[code - SUB_FS], now);
            part += cp->sw[s] * value;
        }
        total += cp->cw * part;
    }
    return total + j->priority;
}

static Core *sort_core;
static int by_score(const void *a, const void *b) {      /* (-score, seq) */
    const JobS *x = &sort_core->jobs[*(const int *)a], *y = &sort_core->jobs[*(const int *)b];
    double nx = -x->score, ny = -y->score;
    if (nx < ny) return -1;
    if (ny < nx) return 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}
static int by_submit(const void *a, const void *b) {     /* (submit, seq) */
    const JobS *x = &sort_core->jobs[*(const int *)a], *y = &sort_core->jobs[*(const int *)b];
    if (x->submit < y->submit) return -1;
    if (y->submit < x->submit) return 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}
static int by_metric(const void *a, const void *b) {     /* sorted(key=-metric), stable */
    const int *x = (const int *)a, *y = (const int *)b;
    double nx = -sort_core->jobs[x[0]].metric, ny = -sort_core->jobs[y[0]].metric;
    if (nx < ny) return -1;
    if (ny < nx) return 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static int rank(Core *c, double now) {
    if (grow((void **)&c->order, &c->caporder, c->nready + 1, sizeof(int)) < 0) return -1;
    memcpy(c->order, c->ready, (size_t)c->nready * sizeof(int));
    c->norder = c->nready;
    sort_core = c;
    if (c->fifo && !c->parked_prio && !c->ready_prio) {
        qsort(c->order, (size_t)c->nready, sizeof(int), by_submit);
        return 0;
    }
    for (idx i = 0; i < c->nready; i++) c->jobs[c->order[i]].score = score(c, &c->jobs[c->order[i]], now);
    qsort(c->order, (size_t)c->nready, sizeof(int), by_score);
    return 0;
}

/* -- the pass (lean.py LeanPass) ----------------------------------------------------- */
static int fits(Core *c, JobS *j, double now) {
    if (j->procs > curve_free(c, now, j->wall)) return 0;
    double free = py_min(prof_min_over(c, now, now + j->wall), c->cap_now);
    return py_floordiv(free, (double)j->ppt) >= (double)j->tasks;
}

static void ready_remove(Core *c, int s) {
    JobS *j = &c->jobs[s];
    int last = c->ready[--c->nready];
    c->ready[j->ready_pos] = last;
    c->jobs[last].ready_pos = j->ready_pos;
    if (j->priority) c->ready_prio--;
}

static int start_job(Core *c, int s, double now, int backfill) {
    JobS *j = &c->jobs[s];
    ready_remove(c, s);
    j->state = RUNNING; j->start = now; j->end = now + j->wall; j->accounted = now;
    if (prof_add(c, now, j->end, -j->procs) < 0) return -1;
    if (PUSH(c->running, c->nrunning, c->caprunning, s) < 0) return -1;
    apply(c, j, j->wall, +1);
    Started st = {s, backfill};
    return PUSH(c->r_st, c->nst, c->capst, st);
}

static int reserve(Core *c, int s, double now) {           /* 1 reserved, 0 not, -1 error */
    JobS *j = &c->jobs[s];
    double t = prof_earliest(c, now, j->wall, j->procs);
    if (t == INFINITY) return 0;
    if (t <= now) {   /* impossible after a failed fit on whole-second times: refuse loudly */
        PyErr_SetString(PyExc_RuntimeError, "site pool: a reservation would begin now");
        return -1;
    }
    if (prof_add(c, t, t + j->wall, -j->procs) < 0) return -1;
    j->reserved = 1; j->rstart = t;
    if (PUSH(c->reserved, c->nreserved, c->capreserved, s) < 0) return -1;
    Created cr = {s, t};
    return PUSH(c->r_cr, c->ncr, c->capcr, cr) < 0 ? -1 : 1;
}

static int nothing_free(Core *c, double now) {
    double held = 0.0;
    for (idx h = 0; h < c->nholds; h++)
        if (c->holds[h].start <= now && now < c->holds[h].end) held = held + c->holds[h].amount;
    return py_min(prof_at(c, now) + held, c->size) <= 0;
}

static idx first_fitting(Core *c, idx from, double now) {
    /* the curve's drops from now on, then one bisection per job (lean._Steps) */
    idx i = bis_right(c->t, 0, c->n, now) - 1, nd = 0;
    double low = py_max(0.0, py_min(c->v[i], c->cap_now)), v0 = low;
    double *off = PyMem_Malloc((size_t)(c->n + 1) * sizeof(double));
    double *lev = PyMem_Malloc((size_t)(c->n + 1) * sizeof(double));
    if (!off || !lev) { PyMem_Free(off); PyMem_Free(lev); PyErr_NoMemory(); return -2; }
    for (idx k = i + 1; k < c->n; k++) {
        double v = c->v[k];
        if (v < low) {
            low = py_max(v, 0.0); off[nd] = c->t[k] - now; lev[nd] = low; nd++;
            if (low == 0) break;
        }
    }
    idx found = -1;
    for (idx k = from; k < c->norder && found < 0; k++) {
        JobS *j = &c->jobs[c->order[k]];
        idx m = bis_left(off, 0, nd, j->wall);
        if (j->procs <= (m ? lev[m - 1] : v0)) found = k;
    }
    PyMem_Free(off); PyMem_Free(lev);
    return found;
}

static int run_pass(Core *c, double now) {
    idx n = c->norder, np = 0, nd = 0, seen = -1, fits_at = -1;
    if (grow((void **)&c->picks, &c->cappd, 2 * (n + 1), sizeof(int)) < 0) return -1;
    int *picks = c->picks, *deferred = c->picks + n + 1;
    long held = 0; int blocked = 0, full = 0;
    for (idx i = 0; i < n; i++) {
        int s = c->order[i]; JobS *j = &c->jobs[s];
        if ((double)held >= c->depth) {                /* passes.py PassStop */
            if (c->nst != seen) { seen = c->nst; full = nothing_free(c, now); fits_at = -1; }
            if (full) break;
            if (i > fits_at) {
                fits_at = first_fitting(c, i, now);
                if (fits_at == -2) return -1;
                if (fits_at < 0) break;
            }
        }
        if (!idle_allowed(c, j) || !j->ever_fit) { c->throttled++; continue; }
        c->considered++;
        if (!allows(c, j, SOFT)) { deferred[nd++] = s; c->throttled++; continue; }
        if (!blocked || c->at_once) {
            if (fits(c, j, now)) { if (start_job(c, s, now, blocked) < 0) return -1; continue; }
        } else if (fits(c, j, now)) { picks[np++] = s; continue; }
        if ((double)held < c->depth) {
            int r = reserve(c, s, now);
            if (r < 0) return -1;
            held += r;
        }
        blocked = 1;
    }
    if (np > 1) {       /* BESTFIT: the largest metric first, ties in priority order */
        int *pairs = PyMem_Malloc((size_t)np * 2 * sizeof(int));
        if (!pairs) { PyErr_NoMemory(); return -1; }
        for (idx k = 0; k < np; k++) { pairs[2 * k] = picks[k]; pairs[2 * k + 1] = (int)k; }
        sort_core = c;
        qsort(pairs, (size_t)np, 2 * sizeof(int), by_metric);
        for (idx k = 0; k < np; k++) picks[k] = pairs[2 * k];
        PyMem_Free(pairs);
    }
    for (idx k = 0; k < np; k++) {
        JobS *j = &c->jobs[picks[k]];
        if (fits(c, j, now) && allows(c, j, SOFT) && start_job(c, picks[k], now, 1) < 0) return -1;
    }
    for (idx k = 0; k < nd; k++) {
        JobS *j = &c->jobs[deferred[k]];
        if (allows(c, j, HARD) && fits(c, j, now) && allows(c, j, HARD)
                && start_job(c, deferred[k], now, 1) < 0) return -1;
    }
    return 0;
}

/* -- Python binding ------------------------------------------------------------------ */
static void Core_dealloc(Core *c) {
    for (idx i = 0; i < c->njobs; i++) PyMem_Free(c->jobs[i].fixed);
    for (idx i = 0; i < c->ncreds; i++) { PyMem_Free(c->creds[i].tag); PyMem_Free(c->creds[i].val); }
    PyMem_Free(c->t); PyMem_Free(c->v); PyMem_Free(c->jobs); PyMem_Free(c->creds);
    PyMem_Free(c->ready); PyMem_Free(c->running); PyMem_Free(c->reserved); PyMem_Free(c->order);
    PyMem_Free(c->picks); PyMem_Free(c->holds); PyMem_Free(c->comps); PyMem_Free(c->ttag);
    PyMem_Free(c->tval); PyMem_Free(c->r_st); PyMem_Free(c->r_cr); PyMem_Free(c->r_rel);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int new_ring(Core *c, long long **tag, double **val) {
    idx d = c->fs_depth + 1;
    *tag = PyMem_Malloc((size_t)d * sizeof(long long));
    *val = PyMem_Malloc((size_t)d * sizeof(double));
    if (!*tag || !*val) { PyErr_NoMemory(); return -1; }
    for (idx k = 0; k < d; k++) { (*tag)[k] = LLONG_MIN; (*val)[k] = 0.0; }
    return 0;
}

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    PyObject *comps;
    if (!PyArg_ParseTuple(args, "dddiiididiO", &c->size, &c->cap_now, &c->depth, &c->at_once,
                          &c->fifo, &c->fs_on, &c->fs_interval, &c->fs_depth, &c->fs_decay,
                          &c->throttles, &comps))
        return -1;
    if (c->fs_depth < 0) c->fs_depth = 0;
    c->n = 1; c->cap = 16;
    c->t = PyMem_Malloc(16 * sizeof(double)); c->v = PyMem_Malloc(16 * sizeof(double));
    if (!c->t || !c->v) { PyErr_NoMemory(); return -1; }
    c->t[0] = -INFINITY; c->v[0] = c->size;
    if (new_ring(c, &c->ttag, &c->tval) < 0) return -1;
    PyObject *seq = PySequence_Fast(comps, "components must be a sequence");
    if (!seq) return -1;
    c->ncomp = (int)PySequence_Fast_GET_SIZE(seq);
    c->comps = PyMem_Calloc((size_t)c->ncomp + 1, sizeof(Comp));
    for (int k = 0; k < c->ncomp; k++) {
        PyObject *subs; Comp *cp = &c->comps[k];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "diO", &cp->cw, &cp->fixed, &subs)) {
            Py_DECREF(seq); return -1;
        }
        PyObject *ss = PySequence_Fast(subs, "subcomponents must be a sequence");
        if (!ss) { Py_DECREF(seq); return -1; }
        cp->nsub = (int)PySequence_Fast_GET_SIZE(ss);
        if (cp->nsub > MAXSUBS) { Py_DECREF(ss); Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "too many subcomponents"); return -1; }
        for (int s = 0; s < cp->nsub; s++)
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ss, s), "id", &cp->code[s], &cp->sw[s])) {
                Py_DECREF(ss); Py_DECREF(seq); return -1;
            }
        Py_DECREF(ss);
    }
    Py_DECREF(seq);
    return 0;
}

static int opt_double(PyObject *o, int *has, double *out) {
    if (o == Py_None) { *has = 0; *out = 0; return 0; }
    *has = 1; *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Core_credential(Core *c, PyObject *args) {
    Cred cr; PyObject *target, *limits, *maxi;
    memset(&cr, 0, sizeof cr);
    if (!PyArg_ParseTuple(args, "iOiOO", &cr.kind, &target, &cr.tmode, &limits, &maxi)) return NULL;
    if (opt_double(target, &cr.has_target, &cr.tval) < 0 || opt_double(maxi, &cr.has_maxi, &cr.maxi) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(limits, "limits must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != 4) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "4 limits"); return NULL; }
    for (int k = 0; k < 4; k++) {
        PyObject *lim = PySequence_Fast_GET_ITEM(seq, k);
        if (lim == Py_None) continue;
        if (!PyArg_ParseTuple(lim, "dd", &cr.lim[k][0], &cr.lim[k][1])) { Py_DECREF(seq); return NULL; }
        cr.has_lim[k] = 1; cr.any_lim = 1;
    }
    Py_DECREF(seq);
    cr.pct_gen = (unsigned long)-1;
    if (new_ring(c, &cr.tag, &cr.val) < 0) return NULL;
    if (PUSH(c->creds, c->ncreds, c->capcreds, cr) < 0) return NULL;
    return PyLong_FromSsize_t(c->ncreds - 1);
}

static PyObject *Core_submit(Core *c, PyObject *args) {
    JobS j; PyObject *bykind, *fixed; int ready;
    memset(&j, 0, sizeof j);
    if (!PyArg_ParseTuple(args, "Ldddlldddd" "OOii", &j.seq, &j.submit, &j.wall, &j.procs, &j.tasks,
                          &j.ppt, &j.priority, &j.metric, &j.rate, &j.accounted, &bykind, &fixed,
                          &ready, &j.ever_fit))
        return NULL;
    PyObject *bk = PySequence_Fast(bykind, "credentials must be a sequence");
    if (!bk) return NULL;
    for (int k = 0; k < KINDS; k++) {
        j.bykind[k] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(bk, k));
        if (j.bykind[k] >= 0) j.creds[j.ncred++] = j.bykind[k];
    }
    Py_DECREF(bk);
    j.fixed = PyMem_Calloc((size_t)c->ncomp + 1, sizeof(double));
    PyObject *fx = PySequence_Fast(fixed, "fixed parts must be a sequence");
    if (!fx || !j.fixed) { Py_XDECREF(fx); PyMem_Free(j.fixed); return PyErr_NoMemory(); }
    for (int k = 0; k < c->ncomp && k < PySequence_Fast_GET_SIZE(fx); k++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fx, k);
        j.fixed[k] = o == Py_None ? NAN : PyFloat_AsDouble(o);
    }
    Py_DECREF(fx);
    if (PyErr_Occurred()) { PyMem_Free(j.fixed); return NULL; }
    j.state = ready ? IDLE_READY : IDLE_PARKED;
    int slot = (int)c->njobs;
    if (PUSH(c->jobs, c->njobs, c->capjobs, j) < 0) return NULL;
    if (ready) {
        c->jobs[slot].ready_pos = (int)c->nready;
        if (PUSH(c->ready, c->nready, c->capready, slot) < 0) return NULL;
        if (j.priority) c->ready_prio++;
    } else if (j.priority) c->parked_prio++;
    return PyLong_FromLong(slot);
}

static JobS *job_at(Core *c, int s) {
    if (s < 0 || s >= c->njobs) { PyErr_SetString(PyExc_IndexError, "no such job slot"); return NULL; }
    return &c->jobs[s];
}

static int unreserve(Core *c, int s) {
    JobS *j = &c->jobs[s];
    if (!j->reserved) return 0;
    j->reserved = 0;
    return prof_add(c, j->rstart, j->rstart + j->wall, j->procs);
}

static PyObject *Core_cancel(Core *c, PyObject *args) {
    int s; if (!PyArg_ParseTuple(args, "i", &s)) return NULL;
    JobS *j = job_at(c, s); if (!j) return NULL;
    if (j->state == IDLE_READY) ready_remove(c, s);
    else if (j->state == IDLE_PARKED && j->priority) c->parked_prio--;
    j->state = GONE;
    int had = j->reserved;
    if (had) {
        if (unreserve(c, s) < 0) return NULL;
        idx m = 0;
        for (idx k = 0; k < c->nreserved; k++) if (c->reserved[k] != s) c->reserved[m++] = c->reserved[k];
        c->nreserved = m;
    }
    return PyBool_FromLong(had);
}

static PyObject *Core_ended(Core *c, PyObject *args) {
    int s; double now;
    if (!PyArg_ParseTuple(args, "id", &s, &now)) return NULL;
    JobS *j = job_at(c, s); if (!j) return NULL;
    if (c->fs_on) {   /* Scheduler._accrue_one */
        double since = j->accounted, upto = py_min(now, j->end);
        if (upto > since) fs_add(c, j, j->rate, since, upto);
        j->accounted = py_max(since, upto);
    }
    double a = py_max(j->start, now);
    if (j->end > a && prof_add(c, a, j->end, j->procs) < 0) return NULL;
    apply(c, j, j->wall, -1);
    j->state = GONE;
    idx m = 0;
    for (idx k = 0; k < c->nrunning; k++) if (c->running[k] != s) c->running[m++] = c->running[k];
    c->nrunning = m;
    Py_RETURN_NONE;
}

static PyObject *Core_restore(Core *c, PyObject *args) {
    int s; double start;
    if (!PyArg_ParseTuple(args, "id", &s, &start)) return NULL;
    JobS *j = job_at(c, s); if (!j) return NULL;
    if (j->state == IDLE_READY) ready_remove(c, s);
    else if (j->state == IDLE_PARKED && j->priority) c->parked_prio--;
    j->state = RUNNING; j->start = start; j->end = start + j->wall; j->accounted = start;
    if (prof_add(c, start, j->end, -j->procs) < 0) return NULL;
    if (PUSH(c->running, c->nrunning, c->caprunning, s) < 0) return NULL;
    apply(c, j, j->wall, +1);
    Py_RETURN_NONE;
}

static PyObject *Core_add(Core *c, PyObject *args) {
    double a, b, d;
    if (!PyArg_ParseTuple(args, "ddd", &a, &b, &d)) return NULL;
    if (prof_add(c, a, b, d) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_set_holds(Core *c, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O", &list)) return NULL;
    PyObject *seq = PySequence_Fast(list, "holds must be a sequence");
    if (!seq) return NULL;
    c->nholds = 0;
    for (idx k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        HoldS h;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, k), "ddd", &h.start, &h.end, &h.amount)
                || PUSH(c->holds, c->nholds, c->capholds, h) < 0) { Py_DECREF(seq); return NULL; }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyObject *Core_iterate(Core *c, PyObject *args) {
    double now;
    if (!PyArg_ParseTuple(args, "d", &now)) return NULL;
    c->gen++; c->now = now; c->nst = c->ncr = c->nrel = 0; c->considered = c->throttled = 0;
    if (c->n > 1 && c->t[1] <= now) prof_prune(c, now);
    if (c->fs_on) accrue(c, now);
    for (idx k = 0; k < c->ncreds; k++) c->creds[k].seen = 0;
    if (rank(c, now) < 0) return NULL;
    for (idx k = 0; k < c->nreserved; k++) {      /* CURRENTHIGHEST: every reservation goes */
        if (unreserve(c, c->reserved[k]) < 0) return NULL;
        if (PUSH(c->r_rel, c->nrel, c->caprel, c->reserved[k]) < 0) return NULL;
    }
    c->nreserved = 0;
    if (run_pass(c, now) < 0) return NULL;
    PyObject *st = PyList_New(c->nst), *cr = PyList_New(c->ncr), *rel = PyList_New(c->nrel);
    if (!st || !cr || !rel) { Py_XDECREF(st); Py_XDECREF(cr); Py_XDECREF(rel); return NULL; }
    for (idx k = 0; k < c->nst; k++)
        PyList_SET_ITEM(st, k, Py_BuildValue("ii", c->r_st[k].slot, c->r_st[k].backfill));
    for (idx k = 0; k < c->ncr; k++)
        PyList_SET_ITEM(cr, k, Py_BuildValue("id", c->r_cr[k].slot, c->r_cr[k].t));
    for (idx k = 0; k < c->nrel; k++) PyList_SET_ITEM(rel, k, PyLong_FromLong(c->r_rel[k]));
    return Py_BuildValue("NNNll", st, cr, rel, c->considered, c->throttled);
}

static PyObject *Core_next_reservation(Core *c, PyObject *args) {
    double now, best = INFINITY;
    if (!PyArg_ParseTuple(args, "d", &now)) return NULL;
    for (idx k = 0; k < c->nreserved; k++) {
        double t = c->jobs[c->reserved[k]].rstart;
        if (t > now && t < best) best = t;
    }
    return PyFloat_FromDouble(best);
}

static PyObject *Core_min_over(Core *c, PyObject *args) {
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b)) return NULL;
    return PyFloat_FromDouble(prof_min_over(c, a, b));
}

static PyObject *ring_list(Core *c, const long long *tag, const double *val) {
    PyObject *out = PyList_New(0);
    for (idx k = 0; out && k <= c->fs_depth; k++) {
        if (tag[k] == LLONG_MIN) continue;
        PyObject *item = Py_BuildValue("Ld", tag[k], val[k]);
        if (!item || PyList_Append(out, item) < 0) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
        Py_DECREF(item);
    }
    return out;
}

static PyObject *Core_export(Core *c, PyObject *noargs) {
    PyObject *run = PyList_New(c->nrunning), *res = PyList_New(c->nreserved), *use = PyList_New(c->ncreds);
    if (!run || !res || !use) goto fail;
    for (idx k = 0; k < c->nrunning; k++) {
        JobS *j = &c->jobs[c->running[k]];
        PyList_SET_ITEM(run, k, Py_BuildValue("idd", c->running[k], j->start, j->accounted));
    }
    for (idx k = 0; k < c->nreserved; k++)
        PyList_SET_ITEM(res, k, Py_BuildValue("id", c->reserved[k], c->jobs[c->reserved[k]].rstart));
    for (idx k = 0; k < c->ncreds; k++) {
        PyObject *r = ring_list(c, c->creds[k].tag, c->creds[k].val);
        if (!r) goto fail;
        PyList_SET_ITEM(use, k, r);
    }
    PyObject *tot = ring_list(c, c->ttag, c->tval);
    if (!tot) goto fail;
    return Py_BuildValue("NNNN", run, res, use, tot);
fail:
    Py_XDECREF(run); Py_XDECREF(res); Py_XDECREF(use);
    return NULL;
}

static PyObject *Core_profile(Core *c, PyObject *noargs) {
    PyObject *t = PyList_New(c->n), *v = PyList_New(c->n);
    if (!t || !v) { Py_XDECREF(t); Py_XDECREF(v); return NULL; }
    for (idx k = 0; k < c->n; k++) {
        PyList_SET_ITEM(t, k, PyFloat_FromDouble(c->t[k]));
        PyList_SET_ITEM(v, k, PyFloat_FromDouble(c->v[k]));
    }
    return Py_BuildValue("NN", t, v);
}

static PyMethodDef Core_methods[] = {
    {"credential", (PyCFunction)Core_credential, METH_VARARGS,
     "credential(kind, fs target or None, target mode, 4 (soft, hard) limits or None, MAXIJOB or None) -> index"},
    {"submit", (PyCFunction)Core_submit, METH_VARARGS,
     "submit(seq, submit, walltime, procs, tasks, ppt, priority, metric, rate, accounted, "
     "credential per kind, fixed parts, ready, ever_fit) -> slot"},
    {"cancel", (PyCFunction)Core_cancel, METH_VARARGS, "cancel(slot) -> whether it held a reservation"},
    {"ended", (PyCFunction)Core_ended, METH_VARARGS, "ended(slot, now)"},
    {"restore", (PyCFunction)Core_restore, METH_VARARGS, "restore(slot, start): running since start"},
    {"add", (PyCFunction)Core_add, METH_VARARGS, "add(start, end, delta): free amount over [start, end)"},
    {"set_holds", (PyCFunction)Core_set_holds, METH_VARARGS, "set_holds([(start, end, amount)])"},
    {"iterate", (PyCFunction)Core_iterate, METH_VARARGS,
     "iterate(now) -> ([(slot, backfill)], [(slot, start)], [slot], considered, throttled)"},
    {"next_reservation", (PyCFunction)Core_next_reservation, METH_VARARGS, "earliest reservation start after now"},
    {"min_over", (PyCFunction)Core_min_over, METH_VARARGS, "min_over(start, end): least free"},
    {"export", (PyCFunction)Core_export, METH_NOARGS, "(running, reserved, usage per credential, totals)"},
    {"profile", (PyCFunction)Core_profile, METH_NOARGS, "(times, values) of the free-processor profile"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "grid_tasks.maui._site.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The site pool's state and iteration (pool_site.py is its Python side).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_site",
    .m_doc = "Compiled core of the site pool (lean.py on the general engine is the reference).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__site(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) { Py_DECREF(&CoreType); Py_DECREF(m); return NULL; }
    return m;
}
