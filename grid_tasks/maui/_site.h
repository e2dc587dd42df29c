/* The site pool's compiled core, shared declarations (see _site_core.c for why it
 * exists and how it stays identical to the Python reference; _site.c binds it). */
#ifndef GRID_TASKS_SITE_H
#define GRID_TASKS_SITE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
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
    /* whether each time is a Python float (else an int): the times handed back are the
     * same objects the general engine's arithmetic would make, int or float */
    int wallf, rstartf, startf, endf;
} JobS;

typedef struct { double cw; int fixed, nsub; int code[MAXSUBS]; double sw[MAXSUBS]; } Comp;
typedef struct { double start, end, amount; } HoldS;
typedef struct { int slot, backfill; } Started;
typedef struct { int slot; double t; int tf; } Created;

typedef struct {
    PyObject_HEAD
    double *t, *v; idx n, cap;                      /* the free-processor profile */
    unsigned char *tf;                              /* per breakpoint: a float time (else int) */
    JobS *jobs; idx njobs, capjobs;
    Cred *creds; idx ncreds, capcreds;
    int *ready; idx nready, capready;               /* idle jobs that may ever start */
    int *free_slots; idx nfree, capfree;            /* slots of jobs gone, for reuse */
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
    double now; int nowf;
    /* results of one iteration */
    Started *r_st; idx nst, capst;
    Created *r_cr; idx ncr, capcr;
    int *r_rel; idx nrel, caprel;
    long considered, throttled;
} Core;


static inline int grow(void **p, idx *cap, idx need, size_t size) {
    if (need <= *cap) return 0;
    idx c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * size);
    if (!q) { PyErr_NoMemory(); return -1; }
    *p = q; *cap = c;
    return 0;
}

/* append x to arr (n items, cap allocated): 0, or -1 with MemoryError set */
#define PUSH(arr, n, cap, x) \
    (grow((void **)&(arr), &(cap), (n) + 1, sizeof(*(arr))) < 0 ? -1 : ((arr)[(n)++] = (x), 0))

/* _site_core.c: every decision, in the Python reference's arithmetic */
int site_new_ring(Core *c, long long **tag, double **val);
int site_prof_add(Core *c, double start, int sf, double end, int ef, double delta);
double site_prof_min_over(Core *c, double start, double end);
int site_slot(Core *c, JobS *j, int ready);
int site_cancel(Core *c, int s);
int site_ended(Core *c, int s, double now, int nowf);
int site_restore(Core *c, int s, double start, int startf);
int site_iterate(Core *c, double now, int nowf);
double site_next_reservation(Core *c, double now, int *flag);
#endif
