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
#include "_site.h"

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

static idx prof_split(Core *c, double x, int xf) {
    idx i = bis_right(c->t, 0, c->n, x) - 1;
    if (c->t[i] == x) return i;   /* the breakpoint there keeps its own time (and type) */
    idx cap = c->cap;
    if (grow((void **)&c->t, &cap, c->n + 1, sizeof(double)) < 0) return -1;
    cap = c->cap;
    if (grow((void **)&c->v, &cap, c->n + 1, sizeof(double)) < 0) return -1;
    cap = c->cap;
    if (grow((void **)&c->tf, &cap, c->n + 1, sizeof(unsigned char)) < 0) return -1;
    c->cap = cap;
    memmove(c->t + i + 2, c->t + i + 1, (size_t)(c->n - i - 1) * sizeof(double));
    memmove(c->v + i + 2, c->v + i + 1, (size_t)(c->n - i - 1) * sizeof(double));
    memmove(c->tf + i + 2, c->tf + i + 1, (size_t)(c->n - i - 1));
    c->t[i + 1] = x; c->v[i + 1] = c->v[i]; c->tf[i + 1] = (unsigned char)xf; c->n++;
    return i + 1;
}

int site_prof_add(Core *c, double start, int sf, double end, int ef, double delta) {
    if (end <= start || delta == 0) return 0;
    idx i = prof_split(c, start, sf);
    if (i < 0) return -1;
    idx j = c->n;
    if (end < INFINITY) { j = prof_split(c, end, ef); if (j < 0) return -1; }
    for (idx k = i; k < j; k++) c->v[k] += delta;
    return 0;
}

static double prof_at(Core *c, double x) { return c->v[bis_right(c->t, 0, c->n, x) - 1]; }

double site_prof_min_over(Core *c, double start, double end) {
    idx i = bis_right(c->t, 0, c->n, start) - 1;
    double m = c->v[i];
    for (i++; i < c->n && c->t[i] < end; i++) if (c->v[i] < m) m = c->v[i];
    return m;
}

static double prof_earliest(Core *c, double start, int sf, double duration, double need, int *xf) {
    idx n = c->n, i = bis_right(c->t, 0, n, start) - 1;
    double x = start;
    *xf = sf;
    for (;;) {
        double end = x + duration;
        idx k = i; int ok = 1;
        while (k < n && (k == i || c->t[k] < end)) {
            if (c->v[k] < need) { ok = 0; break; }
            k++;
        }
        if (ok) return x;
        if (k + 1 >= n) return INFINITY;
        i = k + 1; x = c->t[i]; *xf = c->tf[i];
    }
}

static void prof_prune(Core *c, double now) {
    idx i = bis_right(c->t, 0, c->n, now) - 1, m = 1;
    c->v[0] = c->v[i]; c->t[0] = -INFINITY; c->tf[0] = 1;
    for (idx k = i + 1; k < c->n; k++)
        if (c->v[k] != c->v[m - 1]) { c->t[m] = c->t[k]; c->v[m] = c->v[k]; c->tf[m] = c->tf[k]; m++; }
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
    double free = py_min(site_prof_min_over(c, now, now + j->wall), c->cap_now);
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
    j->startf = c->nowf; j->endf = c->nowf | j->wallf;
    if (site_prof_add(c, now, j->startf, j->end, j->endf, -j->procs) < 0) return -1;
    if (PUSH(c->running, c->nrunning, c->caprunning, s) < 0) return -1;
    apply(c, j, j->wall, +1);
    Started st = {s, backfill};
    return PUSH(c->r_st, c->nst, c->capst, st);
}

static int reserve(Core *c, int s, double now) {           /* 1 reserved, 0 not, -1 error */
    JobS *j = &c->jobs[s];
    int tf;
    double t = prof_earliest(c, now, c->nowf, j->wall, j->procs, &tf);
    if (t == INFINITY) return 0;
    if (t <= now) {   /* impossible after a failed fit on whole-second times: refuse loudly */
        PyErr_SetString(PyExc_RuntimeError, "site pool: a reservation would begin now");
        return -1;
    }
    if (site_prof_add(c, t, tf, t + j->wall, tf | j->wallf, -j->procs) < 0) return -1;
    j->reserved = 1; j->rstart = t; j->rstartf = tf;
    if (PUSH(c->reserved, c->nreserved, c->capreserved, s) < 0) return -1;
    Created cr = {s, t, tf};
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

/* -- the job's life, for the binding --------------------------------------------------- */
int site_new_ring(Core *c, long long **tag, double **val) {
    idx d = c->fs_depth + 1;
    *tag = PyMem_Malloc((size_t)d * sizeof(long long));
    *val = PyMem_Malloc((size_t)d * sizeof(double));
    if (!*tag || !*val) { PyErr_NoMemory(); return -1; }
    for (idx k = 0; k < d; k++) { (*tag)[k] = LLONG_MIN; (*val)[k] = 0.0; }
    return 0;
}

/* A slot for job ``j`` (a freed one when there is one: a long replay or a live
 * scheduler keeps only the jobs still known); its ``fixed`` buffer is taken over. */
int site_slot(Core *c, JobS *j, int ready) {
    int slot;
    j->state = ready ? IDLE_READY : IDLE_PARKED;
    if (c->nfree) {
        slot = c->free_slots[--c->nfree];
        PyMem_Free(c->jobs[slot].fixed);
        c->jobs[slot] = *j;
    } else {
        slot = (int)c->njobs;
        if (PUSH(c->jobs, c->njobs, c->capjobs, *j) < 0) return -1;
    }
    if (ready) {
        c->jobs[slot].ready_pos = (int)c->nready;
        if (PUSH(c->ready, c->nready, c->capready, slot) < 0) return -1;
        if (j->priority) c->ready_prio++;
    } else if (j->priority) c->parked_prio++;
    return slot;
}

static void leave_idle(Core *c, int s) {
    JobS *j = &c->jobs[s];
    if (j->state == IDLE_READY) ready_remove(c, s);
    else if (j->state == IDLE_PARKED && j->priority) c->parked_prio--;
}

static int gone(Core *c, int s) {
    c->jobs[s].state = GONE;
    return PUSH(c->free_slots, c->nfree, c->capfree, s);
}

static int unreserve(Core *c, int s) {
    JobS *j = &c->jobs[s];
    if (!j->reserved) return 0;
    j->reserved = 0;
    return site_prof_add(c, j->rstart, j->rstartf, j->rstart + j->wall, j->rstartf | j->wallf, j->procs);
}

/* An idle job withdrawn: 1 when it held a reservation (given back), 0 if not, -1 error. */
int site_cancel(Core *c, int s) {
    int had = c->jobs[s].reserved;
    leave_idle(c, s);
    if (had) {
        if (unreserve(c, s) < 0) return -1;
        idx m = 0;
        for (idx k = 0; k < c->nreserved; k++) if (c->reserved[k] != s) c->reserved[m++] = c->reserved[k];
        c->nreserved = m;
    }
    return gone(c, s) < 0 ? -1 : had;
}

/* A running job left (Scheduler.job_ended): its last accrual, the rest of its walltime
 * freed, its throttle usage given back. */
int site_ended(Core *c, int s, double now, int nowf) {
    JobS *j = &c->jobs[s];
    if (c->fs_on) {   /* Scheduler._accrue_one */
        double since = j->accounted, upto = py_min(now, j->end);
        if (upto > since) fs_add(c, j, j->rate, since, upto);
        j->accounted = py_max(since, upto);
    }
    double a = py_max(j->start, now);   /* max(start, now): now's object only when later */
    int af = now > j->start ? nowf : j->startf;
    if (j->end > a && site_prof_add(c, a, af, j->end, j->endf, j->procs) < 0) return -1;
    apply(c, j, j->wall, -1);
    idx m = 0;
    for (idx k = 0; k < c->nrunning; k++) if (c->running[k] != s) c->running[m++] = c->running[k];
    c->nrunning = m;
    return gone(c, s);
}

/* A job running since ``start`` (Scheduler.restore_running). */
int site_restore(Core *c, int s, double start, int startf) {
    JobS *j = &c->jobs[s];
    leave_idle(c, s);
    j->state = RUNNING; j->start = start; j->end = start + j->wall; j->accounted = start;
    j->startf = startf; j->endf = startf | j->wallf;
    if (site_prof_add(c, start, j->startf, j->end, j->endf, -j->procs) < 0) return -1;
    if (PUSH(c->running, c->nrunning, c->caprunning, s) < 0) return -1;
    apply(c, j, j->wall, +1);
    return 0;
}

/* Scheduler._iterate under CURRENTHIGHEST: accrue, rank, drop every job reservation,
 * one pass; the decisions are left in r_st, r_cr and r_rel. */
int site_iterate(Core *c, double now, int nowf) {
    c->gen++; c->now = now; c->nowf = nowf; c->nst = c->ncr = c->nrel = 0; c->considered = c->throttled = 0;
    if (c->n > 1 && c->t[1] <= now) prof_prune(c, now);
    if (c->fs_on) accrue(c, now);
    for (idx k = 0; k < c->ncreds; k++) c->creds[k].seen = 0;
    if (rank(c, now) < 0) return -1;
    for (idx k = 0; k < c->nreserved; k++) {
        if (unreserve(c, c->reserved[k]) < 0) return -1;
        if (PUSH(c->r_rel, c->nrel, c->caprel, c->reserved[k]) < 0) return -1;
    }
    c->nreserved = 0;
    return run_pass(c, now);
}

double site_next_reservation(Core *c, double now, int *flag) {
    double best = INFINITY;   /* min() of the starts in reservation order: the first least */
    *flag = 1;
    for (idx k = 0; k < c->nreserved; k++) {
        JobS *j = &c->jobs[c->reserved[k]];
        if (j->rstart > now && j->rstart < best) { best = j->rstart; *flag = j->rstartf; }
    }
    return best;
}
