/* The conservative pool's hot core, compiled: the free-processor profile, the job
 * reservation book and the compression pass of grid_tasks/maui/pool_conservative.py
 * (with profile.py and reservation_book.py), which stay the reference.
 *
 * Why C: the pass makes hundreds of thousands of reservation moves per trace, each a
 * search, two profile edits and a re-nomination over small arrays; in Python the
 * interpreter's per-operation overhead is the whole cost.  Every decision here is made
 * with the same floating-point operations, in the same order, as the Python code, so
 * both cores decide byte-identically (tests/maui/test_conservative_core.py).
 *
 * A reservation lives in a slot (an int handed to Python).  A key is (submit time,
 * submission sequence): the sequence is unique per scheduler, so it orders exactly as
 * the Python key (submit, seq, job id).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef Py_ssize_t idx;

typedef struct {
    double submit; long long seq;   /* key */
    double need; long ineed; double wall; double start, end;
    int alive;
    double found_b; unsigned long found_gen;
} Slot;

typedef struct { long need; idx n, cap; int *slots; double *begins, *walls; } Bucket;
typedef struct { double a, b; int has_upto; double us; long long uq; idx order; } Region;
typedef struct { double n, d, t, searched; } Gap;
typedef struct { double t; double submit; long long seq; int slot; } Start;

typedef struct {
    PyObject_HEAD
    double *t, *v; idx n, cap;                 /* the profile */
    Slot *slots; idx nslots, capslots;
    int *freed; idx nfreed, capfreed;
    Bucket *bk; idx nb, capb;                  /* buckets, ascending need */
    Region *rg; idx nr, capr;                  /* pending regions */
    Gap *gaps; idx ng, capg;
    int *todo; idx nh, caph;                   /* heap of slots by key */
    Start *st; idx nst, capst;                 /* heap of (start, key) */
    double *most; idx capmost;
    unsigned long gen;
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

static idx bis_right(const double *a, idx lo, idx hi, double x) {
    while (lo < hi) { idx m = (lo + hi) / 2; if (x < a[m]) hi = m; else lo = m + 1; }
    return lo;
}

static idx bis_left(const double *a, idx lo, idx hi, double x) {
    while (lo < hi) { idx m = (lo + hi) / 2; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
}

static double pymax(double a, double b) { return b > a ? b : a; }  /* Python's max(a, b) */

/* -- the profile (profile.py StepProfile) ------------------------------------------ */
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
    double first = c->v[i];
    c->t[0] = -INFINITY; c->v[0] = first;
    for (idx k = i + 1; k < c->n; k++) {
        if (c->v[k] != c->v[m - 1]) { c->t[m] = c->t[k]; c->v[m] = c->v[k]; m++; }
    }
    c->n = m;
}

/* -- keys, buckets, the start heap (reservation_book.py) ---------------------------- */
static int key_lt(const Slot *a, const Slot *b) {
    return a->submit < b->submit || (a->submit == b->submit && a->seq < b->seq);
}

static int key_lt_raw(const Slot *a, double s, long long q) {
    return a->submit < s || (a->submit == s && a->seq < q);
}

/* (start, key) of slot x before (start, key) of slot y */
static int entry_lt(Core *c, double sx, int x, double sy, int y) {
    return sx < sy || (sx == sy && key_lt(&c->slots[x], &c->slots[y]));
}

static idx bucket_find(Core *c, long need) {
    idx lo = 0, hi = c->nb;
    while (lo < hi) { idx m = (lo + hi) / 2; if (c->bk[m].need < need) lo = m + 1; else hi = m; }
    return lo;
}

static idx entry_pos(Core *c, Bucket *b, double start, int s) {   /* bisect_left */
    idx lo = 0, hi = b->n;
    while (lo < hi) {
        idx m = (lo + hi) / 2;
        if (entry_lt(c, b->begins[m], b->slots[m], start, s)) lo = m + 1; else hi = m;
    }
    return lo;
}

static int bucket_insert(Core *c, Bucket *b, int s) {
    Slot *r = &c->slots[s];
    idx cap = b->cap;
    if (grow((void **)&b->slots, &cap, b->n + 1, sizeof(int)) < 0) return -1;
    cap = b->cap;
    if (grow((void **)&b->begins, &cap, b->n + 1, sizeof(double)) < 0) return -1;
    cap = b->cap;
    if (grow((void **)&b->walls, &cap, b->n + 1, sizeof(double)) < 0) return -1;
    b->cap = cap;
    idx at = entry_pos(c, b, r->start, s), tail = b->n - at;
    memmove(b->slots + at + 1, b->slots + at, (size_t)tail * sizeof(int));
    memmove(b->begins + at + 1, b->begins + at, (size_t)tail * sizeof(double));
    memmove(b->walls + at + 1, b->walls + at, (size_t)tail * sizeof(double));
    b->slots[at] = s; b->begins[at] = r->start; b->walls[at] = r->wall; b->n++;
    return 0;
}

static void bucket_remove(Core *c, Bucket *b, int s) {
    idx at = entry_pos(c, b, c->slots[s].start, s), tail = b->n - at - 1;
    memmove(b->slots + at, b->slots + at + 1, (size_t)tail * sizeof(int));
    memmove(b->begins + at, b->begins + at + 1, (size_t)tail * sizeof(double));
    memmove(b->walls + at, b->walls + at + 1, (size_t)tail * sizeof(double));
    b->n--;
}

static int start_lt(const Start *a, const Start *b) {
    return a->t < b->t || (a->t == b->t && (a->submit < b->submit ||
                                            (a->submit == b->submit && a->seq < b->seq)));
}

static int starts_push(Core *c, int s) {
    if (grow((void **)&c->st, &c->capst, c->nst + 1, sizeof(Start)) < 0) return -1;
    Slot *r = &c->slots[s];
    Start e = {r->start, r->submit, r->seq, s};
    idx k = c->nst++;
    while (k > 0) {
        idx p = (k - 1) / 2;
        if (!start_lt(&e, &c->st[p])) break;
        c->st[k] = c->st[p]; k = p;
    }
    c->st[k] = e;
    return 0;
}

static void starts_pop(Core *c) {
    Start e = c->st[--c->nst];
    idx k = 0, n = c->nst;
    for (;;) {
        idx l = 2 * k + 1;
        if (l >= n) break;
        if (l + 1 < n && start_lt(&c->st[l + 1], &c->st[l])) l++;
        if (!start_lt(&c->st[l], &e)) break;
        c->st[k] = c->st[l]; k = l;
    }
    if (n) c->st[k] = e;
}

static int start_live(Core *c, const Start *e) {
    const Slot *r = &c->slots[e->slot];
    return r->alive && r->seq == e->seq && r->start == e->t;
}

static int book_move(Core *c, int s, double start, double end) {
    Slot *r = &c->slots[s];
    Bucket *b = &c->bk[bucket_find(c, r->ineed)];
    bucket_remove(c, b, s);
    r->start = start; r->end = end;
    if (bucket_insert(c, b, s) < 0) return -1;
    return starts_push(c, s);
}

/* -- the todo heap of slots, by key ------------------------------------------------- */
static int todo_push(Core *c, int s) {
    if (grow((void **)&c->todo, &c->caph, c->nh + 1, sizeof(int)) < 0) return -1;
    idx k = c->nh++;
    while (k > 0) {
        idx p = (k - 1) / 2;
        if (!key_lt(&c->slots[s], &c->slots[c->todo[p]])) break;
        c->todo[k] = c->todo[p]; k = p;
    }
    c->todo[k] = s;
    return 0;
}

static int todo_pop(Core *c) {
    int top = c->todo[0], e = c->todo[--c->nh];
    idx k = 0, n = c->nh;
    for (;;) {
        idx l = 2 * k + 1;
        if (l >= n) break;
        if (l + 1 < n && key_lt(&c->slots[c->todo[l + 1]], &c->slots[c->todo[l]])) l++;
        if (!key_lt(&c->slots[c->todo[l]], &c->slots[e])) break;
        c->todo[k] = c->todo[l]; k = l;
    }
    if (n) c->todo[k] = e;
    return top;
}

/* -- nomination (ReservationBook.nominate and _runs) -------------------------------- */
static void runs(Core *c, idx m, idx j, double need, double now, double cap,
                 double *longest, double *far) {
    const double *t = c->t, *v = c->v;
    idx n = c->n;
    while (m > 0 && v[m - 1] >= need && t[m] > now) m--;
    *longest = *far = -INFINITY;
    for (;;) {
        double start = pymax(t[m], now);
        idx q = m + 1;
        while (q < n && v[q] >= need && t[q] < cap) q++;
        double end = (q == n || t[q] >= cap) ? INFINITY : t[q];
        if (end - start > *longest) *longest = end - start;
        *far = end;
        if (end == INFINITY) return;
        while (q < j && v[q] < need) q++;
        if (q >= j) return;
        m = q;
    }
}

/* Nominate into the todo heap: after < 0 for none; has_upto with (us, uq) the bound. */
static int nominate(Core *c, double a, double b, double now, int after,
                    int has_upto, double us, long long uq) {
    double lo = pymax(a, now);
    if (b <= lo || c->nb == 0) return 0;
    const double *t = c->t, *v = c->v;
    idx i = bis_right(t, 0, c->n, lo) - 1;
    idx j = bis_left(t, i + 1, c->n, b);
    if (grow((void **)&c->most, &c->capmost, j - i, sizeof(double)) < 0) return -1;
    double *most = c->most;
    idx nm = j - i;
    most[0] = v[i];
    for (idx k = 1; k < nm; k++) most[k] = pymax(most[k - 1], v[i + k]);
    double top = most[nm - 1], longest = INFINITY, far = INFINITY;
    for (idx bi = 0; bi < c->nb; bi++) {
        Bucket *bk = &c->bk[bi];
        double need = (double)bk->need;
        if (need > top) break;
        idx k = most[0] >= need ? 0 : bis_left(most, 0, nm, need);
        double tau = k == 0 ? lo : t[i + k];
        idx pos = bis_right(bk->begins, 0, bk->n, tau);
        if (pos == bk->n) continue;
        if (far < bk->begins[pos]) {
            double mw = bk->walls[pos];
            for (idx x = pos + 1; x < bk->n; x++) if (bk->walls[x] < mw) mw = bk->walls[x];
            if (longest < mw) continue;
        }
        runs(c, i + k, j, need, now, bk->begins[bk->n - 1], &longest, &far);
        t = c->t; v = c->v;
        idx cut = bis_right(bk->begins, pos, bk->n, far);
        for (idx x = pos; x < bk->n; x++) {
            if (x >= cut && !(bk->walls[x] <= longest)) continue;
            int s = bk->slots[x];
            Slot *r = &c->slots[s];
            if (after >= 0 && !key_lt(&c->slots[after], r)) continue;
            if (has_upto && !key_lt_raw(r, us, uq)) continue;
            int seen = r->found_gen == c->gen;
            if (seen && r->found_b >= b) continue;
            if (!seen && todo_push(c, s) < 0) return -1;
            r->found_gen = c->gen; r->found_b = b;
        }
    }
    return 0;
}

/* -- searches of the pass (ConservativePool._gap and _earlier) ----------------------- */
static int add_gap(Core *c, double n, double d, double x, double searched) {
    if (grow((void **)&c->gaps, &c->capg, c->ng + 1, sizeof(Gap)) < 0) return -1;
    Gap g = {n, d, x, searched};
    c->gaps[c->ng++] = g;
    return 0;
}

static int gap(Core *c, double now, double w, double need, double end_by, double *out) {
    for (idx g = 0; g < c->ng; g++) {
        Gap *e = &c->gaps[g];
        if (e->n <= need && e->d <= w) {
            if (e->t < INFINITY && (e->t + e->d > end_by || (e->n == need && e->d == w))) {
                *out = e->t + w <= end_by ? e->t : INFINITY;
                return 0;
            }
            if (e->t == INFINITY && e->searched >= end_by) { *out = INFINITY; return 0; }
        }
    }
    const double *t = c->t, *v = c->v;
    idx i = bis_right(t, 0, c->n, now) - 1, hi = bis_left(t, i + 1, c->n, end_by);
    double found = INFINITY, run = 0;
    int have = 0;
    for (idx k = i; k < hi; k++) {
        if (v[k] < need) { have = 0; continue; }
        if (!have) { run = k == i ? now : t[k]; have = 1; }
        if (t[k + 1] >= run + w) { found = run; break; }
    }
    *out = found;
    return add_gap(c, need, w, found, end_by);
}

static double earlier(Core *c, double now, double w, double need, double limit, double reach) {
    const double *t = c->t, *v = c->v;
    idx i = bis_right(t, 0, c->n, now) - 1, hi = bis_left(t, i + 1, c->n, limit);
    if (v[hi - 1] < need) {
        double m = v[i];
        for (idx k = i + 1; k < hi; k++) m = pymax(m, v[k]);
        if (m < need) return INFINITY;
    }
    idx last = bis_left(t, i + 1, c->n, reach);
    double x = 0;
    int have = 0;
    for (idx k = i; k < hi; k++) {
        if (v[k] < need) { have = 0; continue; }
        if (!have) {
            if (k >= last) return INFINITY;
            x = k == i ? now : t[k]; have = 1;
        }
        if (k + 1 == hi || t[k + 1] >= x + w) return x;
    }
    return INFINITY;
}

/* ConservativePool._advance: 1 when moved (region gone in *ga, *gb, *gave), 0 when not */
static int advance(Core *c, int s, double now, double reach, PyObject *moves,
                   double *ga, double *gb, int *gave) {
    Slot *r = &c->slots[s];
    *gave = 0;
    if (!r->alive || r->start <= now) return 0;
    double old_start = r->start, old_end = r->end, w = r->wall, p = r->need, x;
    idx last = bis_left(c->t, 0, c->n, old_start) - 1;
    if (c->v[last] >= p) {
        x = earlier(c, now, w, p, old_start, reach);
    } else if (now + w < old_start) {
        if (gap(c, now, w, p, c->t[last], &x) < 0) return -1;
        x = x < reach ? x : INFINITY;
    } else {
        return 0;
    }
    if (x == INFINITY) return 0;
    c->ng = 0;
    double end = x + w;
    if (end <= old_start) {
        if (prof_add(c, x, end, -p) < 0 || prof_add(c, old_start, old_end, p) < 0) return -1;
    } else {
        if (prof_add(c, x, old_start, -p) < 0 || prof_add(c, end, old_end, p) < 0) return -1;
    }
    if (book_move(c, s, x, end) < 0) return -1;
    PyObject *item = Py_BuildValue("(idd)", s, x, end);
    if (!item || PyList_Append(moves, item) < 0) { Py_XDECREF(item); return -1; }
    Py_DECREF(item);
    double gone = pymax(old_start, end);
    if (gone < old_end) { *ga = gone; *gb = old_end; *gave = 1; }
    return 1;
}

static int add_region(Core *c, double a, double b, int has_upto, double us, long long uq) {
    if (grow((void **)&c->rg, &c->capr, c->nr + 1, sizeof(Region)) < 0) return -1;
    Region g = {a, b, has_upto, us, uq, c->nr};
    c->rg[c->nr++] = g;
    return 0;
}

static int region_cmp(const void *x, const void *y) {   /* by start, stable */
    const Region *a = x, *b = y;
    if (a->a < b->a) return -1;
    if (b->a < a->a) return 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* _merged over the regions still ahead of ``now``; returns their count in *np */
static Region *pending(Core *c, double now, idx *np) {
    idx n = 0;
    Region *out = PyMem_Malloc((size_t)(c->nr ? c->nr : 1) * sizeof(Region));
    if (!out) { PyErr_NoMemory(); return NULL; }
    for (idx k = 0; k < c->nr; k++) if (c->rg[k].b > now) { out[n] = c->rg[k]; out[n].order = n; n++; }
    c->nr = 0;
    if (n >= 2) {
        qsort(out, (size_t)n, sizeof(Region), region_cmp);
        idx m = 1;
        for (idx k = 1; k < n; k++) {
            Region *last = &out[m - 1], *g = &out[k];
            if (g->a > last->b) { out[m++] = *g; continue; }
            last->b = pymax(g->b, last->b);
            if (!last->has_upto || !g->has_upto) last->has_upto = 0;
            else if (last->us < g->us || (last->us == g->us && last->uq < g->uq)) {
                last->us = g->us; last->uq = g->uq;
            }
        }
        n = m;
    }
    *np = n;
    return out;
}

/* -- the Python type ----------------------------------------------------------------- */
static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    double capacity;
    (void)kw;
    if (!PyArg_ParseTuple(args, "d", &capacity)) return -1;
    c->n = 0;
    if (grow((void **)&c->t, &c->cap, 16, sizeof(double)) < 0) return -1;
    idx cap = 0;
    if (grow((void **)&c->v, &cap, c->cap, sizeof(double)) < 0) return -1;
    c->t[0] = -INFINITY; c->v[0] = capacity; c->n = 1;
    return 0;
}

static void Core_dealloc(Core *c) {
    for (idx k = 0; k < c->nb; k++) {
        PyMem_Free(c->bk[k].slots); PyMem_Free(c->bk[k].begins); PyMem_Free(c->bk[k].walls);
    }
    PyMem_Free(c->t); PyMem_Free(c->v); PyMem_Free(c->slots); PyMem_Free(c->freed);
    PyMem_Free(c->bk); PyMem_Free(c->rg); PyMem_Free(c->gaps); PyMem_Free(c->todo);
    PyMem_Free(c->st); PyMem_Free(c->most);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *Core_add(Core *c, PyObject *args) {
    double a, b, d;
    if (!PyArg_ParseTuple(args, "ddd", &a, &b, &d) || prof_add(c, a, b, d) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_min_over(Core *c, PyObject *args) {
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b)) return NULL;
    return PyFloat_FromDouble(prof_min_over(c, a, b));
}

static PyObject *Core_earliest(Core *c, PyObject *args) {
    double a, d, need;
    if (!PyArg_ParseTuple(args, "ddd", &a, &d, &need)) return NULL;
    return PyFloat_FromDouble(prof_earliest(c, a, d, need));
}

static PyObject *Core_prune_maybe(Core *c, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    if (c->n > 16 && c->t[16] <= now) prof_prune(c, now);
    Py_RETURN_NONE;
}

static PyObject *Core_region(Core *c, PyObject *args) {
    double a, b;
    if (!PyArg_ParseTuple(args, "dd", &a, &b) || add_region(c, a, b, 0, 0, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_reserve(Core *c, PyObject *args) {
    double submit, wall, x;
    long long seq;
    long need;
    if (!PyArg_ParseTuple(args, "dLldd", &submit, &seq, &need, &wall, &x)) return NULL;
    int s;
    if (c->nfreed) s = c->freed[--c->nfreed];
    else {
        if (grow((void **)&c->slots, &c->capslots, c->nslots + 1, sizeof(Slot)) < 0) return NULL;
        s = (int)c->nslots++;
    }
    Slot *r = &c->slots[s];
    memset(r, 0, sizeof(Slot));
    r->submit = submit; r->seq = seq; r->need = (double)need; r->ineed = need; r->wall = wall;
    r->start = x; r->end = x + wall; r->alive = 1;
    if (prof_add(c, x, r->end, -(double)need) < 0) return NULL;
    idx at = bucket_find(c, need);
    if (at == c->nb || c->bk[at].need != need) {
        if (grow((void **)&c->bk, &c->capb, c->nb + 1, sizeof(Bucket)) < 0) return NULL;
        memmove(c->bk + at + 1, c->bk + at, (size_t)(c->nb - at) * sizeof(Bucket));
        memset(&c->bk[at], 0, sizeof(Bucket));
        c->bk[at].need = need; c->nb++;
    }
    if (bucket_insert(c, &c->bk[at], s) < 0 || starts_push(c, s) < 0) return NULL;
    return PyLong_FromLong(s);
}

static PyObject *Core_release(Core *c, PyObject *arg) {
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred()) return NULL;
    if (s < 0 || s >= c->nslots || !c->slots[s].alive) {
        PyErr_Format(PyExc_KeyError, "no reservation in slot %ld", s);
        return NULL;
    }
    Slot *r = &c->slots[s];
    idx at = bucket_find(c, r->ineed);
    Bucket *b = &c->bk[at];
    bucket_remove(c, b, (int)s);
    if (b->n == 0) {
        PyMem_Free(b->slots); PyMem_Free(b->begins); PyMem_Free(b->walls);
        memmove(c->bk + at, c->bk + at + 1, (size_t)(c->nb - at - 1) * sizeof(Bucket));
        c->nb--;
    }
    r->alive = 0;
    if (grow((void **)&c->freed, &c->capfreed, c->nfreed + 1, sizeof(int)) < 0) return NULL;
    c->freed[c->nfreed++] = (int)s;
    Py_RETURN_NONE;
}

static int compress(Core *c, double now, PyObject *moves) {
    idx np;
    Region *regions = pending(c, now, &np);
    if (!regions) return -1;
    c->gen++; c->nh = 0; c->ng = 0;
    int rc = 0;
    for (idx k = 0; k < np && rc == 0; k++)
        rc = nominate(c, regions[k].a, regions[k].b, now, -1,
                      regions[k].has_upto, regions[k].us, regions[k].uq);
    PyMem_Free(regions);
    while (rc == 0 && c->nh) {
        int s = todo_pop(c), gave;
        double a, b;
        rc = advance(c, s, now, c->slots[s].found_b, moves, &a, &b, &gave);
        if (rc < 0) break;
        rc = 0;
        if (gave) {
            Slot *r = &c->slots[s];
            if (add_region(c, a, b, 1, r->submit, r->seq) < 0
                || nominate(c, a, b, now, s, 0, 0, 0) < 0) rc = -1;
        }
    }
    return rc;
}

static PyObject *Core_compress(Core *c, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *moves = PyList_New(0);
    if (!moves) return NULL;
    if (compress(c, now, moves) < 0) { Py_DECREF(moves); return NULL; }
    return moves;
}

static PyObject *Core_due(Core *c, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    while (c->nst && c->st[0].t <= now) {
        Start e = c->st[0];
        starts_pop(c);
        if (!start_live(c, &e)) continue;
        PyObject *s = PyLong_FromLong(e.slot);
        if (!s || PyList_Append(out, s) < 0) { Py_XDECREF(s); Py_DECREF(out); return NULL; }
        Py_DECREF(s);
    }
    return out;
}

static PyObject *Core_next_start(Core *c, PyObject *arg) {
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    while (c->nst && !start_live(c, &c->st[0])) starts_pop(c);
    if (c->nst && c->st[0].t > now) return PyFloat_FromDouble(c->st[0].t);
    int any = 0;
    double best = INFINITY;
    for (idx k = 0; k < c->nslots; k++) {
        Slot *r = &c->slots[k];
        if (r->alive && r->start > now && (!any || r->start < best)) { best = r->start; any = 1; }
    }
    if (!any) Py_RETURN_NONE;
    return PyFloat_FromDouble(best);
}

static PyObject *Core_profile(Core *c, PyObject *unused) {
    (void)unused;
    PyObject *t = PyList_New(c->n), *v = PyList_New(c->n);
    if (!t || !v) { Py_XDECREF(t); Py_XDECREF(v); return NULL; }
    for (idx k = 0; k < c->n; k++) {
        PyList_SET_ITEM(t, k, PyFloat_FromDouble(c->t[k]));
        PyList_SET_ITEM(v, k, PyFloat_FromDouble(c->v[k]));
    }
    return Py_BuildValue("(NN)", t, v);
}

static PyMethodDef Core_methods[] = {
    {"add", (PyCFunction)Core_add, METH_VARARGS, "add(start, end, delta): free amount over [start, end)"},
    {"min_over", (PyCFunction)Core_min_over, METH_VARARGS, "min_over(start, end): least free"},
    {"earliest", (PyCFunction)Core_earliest, METH_VARARGS, "earliest(start, duration, need)"},
    {"prune_maybe", (PyCFunction)Core_prune_maybe, METH_O, "prune_maybe(now): forget the past now and then"},
    {"region", (PyCFunction)Core_region, METH_VARARGS, "region(a, b): free processors rose over [a, b)"},
    {"reserve", (PyCFunction)Core_reserve, METH_VARARGS,
     "reserve(submit, seq, need, walltime, start) -> slot: book and subtract a reservation"},
    {"release", (PyCFunction)Core_release, METH_O, "release(slot): take a reservation off the book"},
    {"compress", (PyCFunction)Core_compress, METH_O, "compress(now) -> [(slot, start, end)] moves in order"},
    {"due", (PyCFunction)Core_due, METH_O, "due(now) -> slots whose reservation begins by now"},
    {"next_start", (PyCFunction)Core_next_start, METH_O, "next_start(now): earliest start after now"},
    {"profile", (PyCFunction)Core_profile, METH_NOARGS, "profile() -> (times, vals)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "grid_tasks.maui._conservative.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The conservative pool's profile, reservation book and compression pass.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_conservative",
    .m_doc = "Compiled core of the conservative pool (pool_conservative.py is the reference).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__conservative(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType); Py_DECREF(m); return NULL;
    }
    return m;
}
