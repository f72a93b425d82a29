/*
 * The transports' decisions, as pure functions of sizes and counts so that
 * tables of cases can test them: which shared-memory allreduce runs for a
 * message and in what chunks, which TCP allreduce, and how long a rank
 * spins or yields before it sleeps while waiting for its peers.
 */
#include "internal.h"

/*
 * Flat: every rank reads every slot, (world + 1) * bytes per rank, with one
 * synchronisation per chunk. Reduce-scatter: 3 * bytes per rank (copy in,
 * its share of all slots, the result out) with two. For more than 2 ranks
 * flat pays while the message is small enough that the second
 * synchronisation costs more than the extra reads: up to FLAT_PEER_BYTES of
 * the others' data per rank.
 */
#define FLAT_PEER_BYTES (192u << 10)
/* Chunks small enough that a rank's slot, what it reads of the others'
 * slots and its part of the user buffer stay in a 1 MiB L2. */
#define CHUNK (256u << 10)

/*
 * Halves, for 2 ranks: each rank copies in only the half its peer reduces,
 * reduces its own half against the peer's copy, hands the result back
 * through the same slot and copies the peer's result out: 1.5 * bytes per
 * rank besides the reduction of half the message, against flat's copy of
 * the whole message and a reduction of all of it, for the same bytes read
 * from the other core, with two synchronisations per chunk instead of one.
 * On a Zen 4 VM (2 vCPUs, 2026-12-07), three rounds alternating with the
 * code before it (flat, and from 512 KiB the faster of flat and the direct
 * reads, below): 1.4 to 3.2 times as fast from 8 KiB to 16 MiB, 1.1 at 4
 * KiB; flat kept the lead at 1 and 2 KiB, where the second synchronisation
 * is most of the time.
 * Its chunks keep what a rank touches, half a chunk in each slot and a chunk
 * of the user buffer, inside a 1 MiB L2.
 */
#define HALF_MIN_BYTES (4u << 10)
#define HALF_CHUNK (512u << 10)

/*
 * Reading the others' buffers directly (CMA) moves about 3.5 bytes per byte
 * of the message per rank with 2 ranks (a kernel copy of the peer's half in,
 * the reduction, a kernel copy of the peer's result half), against 5 for
 * flat (copy in, then read every slot) and 5.5 for reduce-scatter through
 * the slots; it costs three synchronisations and a few system calls per
 * call, which pay from CMA_MIN_BYTES. Its chunk is the piece of the peer
 * read at a time into a temporary.
 *
 * Only for 2 ranks: there each process's memory has one reader. With 3 and
 * 4 ranks (on 2 cores) reading directly was 1.4 to 2.4 times slower than
 * the slots from 512 KiB to 8 MiB, and perf put a third of a rank's time in
 * pinning the peers' pages (follow_page_pte, __get_user_pages) and 8% in
 * spinning on their page-table locks: several ranks read the same process
 * at once, and more ranks on more cores would only contend more.
 */
#define CMA_WORLD 2
#define CMA_MIN_BYTES (512u << 10)
#define CMA_CHUNK (512u << 10)

struct dt_shm_plan dt_shm_plan(size_t bytes, int world, size_t slot, bool cma, bool oversub)
{
    struct dt_shm_plan p = {.algo = DT_SHM_FLAT, .chunk = CHUNK < slot ? CHUNK : slot};
    if (cma && world == CMA_WORLD && bytes >= CMA_MIN_BYTES)
        return (struct dt_shm_plan){.algo = DT_SHM_CMA, .chunk = CMA_CHUNK};
    if (world == 2 && bytes >= HALF_MIN_BYTES)
        return (struct dt_shm_plan){.algo = DT_SHM_HALF,
                                    .chunk = HALF_CHUNK < slot ? HALF_CHUNK : slot};
    if (world <= 2 || bytes * (size_t)(world - 1) <= FLAT_PEER_BYTES)
        return p;
    p.algo = DT_SHM_SPLIT;
    /* Each rank reduces chunk/world: keep that at 64 KiB or more. More ranks than cores
     * take whole slots instead: each synchronisation then waits for ranks that must be
     * scheduled first, and with 4 ranks on 2 cores 1 MiB chunks were 1.1 to 1.3 times as
     * fast as 256 KiB ones from 1 to 8 MiB. */
    size_t c = (size_t)world * (64u << 10);
    c = c < CHUNK ? CHUNK : c;
    if (oversub)
        c = slot;
    p.chunk = c < slot ? c : slot;
    return p;
}

/*
 * Which of the two is faster for 2 ranks depends on the machine's state
 * more than on the size. On this kind of shared VM, in its fast hours the
 * slots ran 512 KiB to 32 MiB at 15 GB/s against 11 to 13 (7 from 16 MiB)
 * for the direct reads, while in its slow hours (everything about 3 times
 * slower) the direct reads were ahead by 5 to 10%. So the two ranks try
 * both and keep the faster, per size class (a power of two from 512 KiB),
 * and try again every DT_PICK_EPOCH calls of that class, so that a change
 * of state is followed. Call k of a class (both ranks count alike) does
 * dt_pick_turn(k); the choice is made from both ranks' published trial
 * results, the same on both, so they always run the same algorithm.
 */
#define PICK_TRIALS 3 /* calls of each algorithm per epoch */

unsigned dt_pick_class(size_t bytes, enum dtrain_dtype dtype)
{
    unsigned c = 0;
    for (size_t b = bytes >> 20; b > 0 && c + 1 < DT_PICK_SIZES; b >>= 1)
        c++;
    return (unsigned)dtype * DT_PICK_SIZES + c;
}

struct dt_pick_turn dt_pick_turn(uint64_t k)
{
    uint64_t i = k % DT_PICK_EPOCH;
    struct dt_pick_turn t = {.try_direct = -1};
    if (i < 2 * PICK_TRIALS) { /* direct first: the first large call asks whether it may */
        t.try_direct = (i & 1) == 0;
        t.record = true;
        t.publish = i == 2 * PICK_TRIALS - 1;
    } else if (i == 2 * PICK_TRIALS) {
        /* Not timed: the peer publishes after its last trial returns, and is known to
         * have done so only once it has posted in this call. */
        t.try_direct = 1;
    } else if (i == 2 * PICK_TRIALS + 1) {
        t.decide = true;
    }
    return t;
}

bool dt_pick_direct(const uint64_t a[2], const uint64_t b[2])
{
    /* A call lasts as long as its slower rank: compare each algorithm's worse best. */
    uint64_t slots = a[0] > b[0] ? a[0] : b[0], direct = a[1] > b[1] ? a[1] : b[1];
    return direct < slots;
}

/*
 * TCP. The ring sends 2(n-1)/n of the buffer in 2(n-1) steps; gathering
 * every rank's whole buffer (then each reduces all n in rank order) sends
 * (n-1) times the buffer in n-1 steps. For 2 ranks both send the buffer
 * once and gather takes one step instead of two; for more, gather pays
 * while the extra (n-2) buffers cost less than the n-1 steps it saves.
 */
#define GATHER_EXTRA_BYTES (128u << 10)
/*
 * Four ranks have a third way: recursive doubling, 0-1 and 2-3 then 1-2 and 3-0, which are
 * all neighbours on the ring, so its connections serve both ways. Two steps of the whole
 * buffer (2 times the buffer sent per rank) against the gather's three and the ring's six
 * of a quarter (1.5 times). 4 ranks on 2 cores over loopback, three rounds alternating:
 * 25 to 35 us against 41 to 56 for the gather at 4 KiB, 57 against 90 to 134 at 64 KiB,
 * 160 against 171 to 215 for the ring at 256 KiB; the ring was ahead from 512 KiB (270
 * against 318 us).
 */
#define PAIRS_BYTES (256u << 10)

enum dt_tcp_algo dt_tcp_plan(size_t bytes, int world)
{
    if (world == 4 && bytes > 0 && bytes <= PAIRS_BYTES)
        return DT_TCP_PAIRS;
    if (world < 2 || bytes == 0 || bytes > DT_TCP_GATHER_CAP / (size_t)world)
        return DT_TCP_RING;
    if (bytes * (size_t)(world - 2) > GATHER_EXTRA_BYTES)
        return DT_TCP_RING;
    return DT_TCP_GATHER;
}

/*
 * AMD Zen 3 runs `rep movsb` four to ten times slower into a destination
 * just past the source modulo 4 KiB, as a malloc'd buffer (offset 16) sits
 * against a page-aligned slot or socket page; glibc's memcpy and the
 * kernel's copy to user space both use it. There tcp receives such
 * destinations through a page-aligned buffer (one more copy), and dt_copy is
 * a vector loop. On family 0x1a (Zen 5) the offset made no difference
 * (loopback at offsets 0, 16, 64, 2048 and 4080: 4.4 to 5.0 GB/s each), and
 * both workarounds only cost: without the staging copy 4 ranks on 2 cores
 * were about 5% faster at 8 and 16 MiB, and memcpy copied shared-memory slots
 * 1.7 to 1.8 times as fast as the loop (docs/dtrain.md).
 *
 * Zen 4 shares family 0x19 with Zen 3 (models 0x10-0x1f, 0x60-0x7f and
 * 0xa0-0xaf). On one (model 0x11, a 2-vCPU VM, 2026-12-07) glibc's memcpy
 * ran 1.4 to 2.1 times slower at offset 16 than at 0 from 16 to 512 KiB
 * (29 to 35 GB/s against 45 to 60), and the loop kept 2 ranks' shared
 * memory 3 to 6% ahead of memcpy from 64 KiB to 8 MiB in the fast rounds of
 * four (memcpy was 2 to 6% ahead at 4 and 16 KiB), so dt_copy is the loop
 * there too; but tcp without the staging copy
 * was 2 to 9% faster from 1 to 4 MiB in the three steady rounds of five, so
 * Zen 4 receives directly. `force`: -1 decide, 0 or 1 (DTRAIN_TCP_STAGE,
 * DTRAIN_COPY_LOOP).
 */
static bool zen4(unsigned model)
{
    return (model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0x7f) ||
           (model >= 0xa0 && model <= 0xaf);
}

bool dt_avoid_movsb(struct dt_cpu cpu, bool kernel, int force)
{
    if (force >= 0)
        return force > 0;
    return cpu.amd && cpu.family == 0x19 && !(kernel && zen4(cpu.model));
}

/*
 * A ring connection's send buffer. Between ranks on one host every sent
 * byte is copied twice by this host's kernel, into the socket and out to the
 * receiver, and how far a sender may run ahead decides whether the second
 * copy finds the bytes in cache. With the 4 MiB that remote peers get (for
 * the bandwidth-delay product of a fast link), a sender hands over a whole
 * segment of a large allreduce before its receiver reads any of it: with 4
 * ranks on 2 cores, 8 and 16 MiB ran at about 1.0 GB/s. A 256 KiB send
 * buffer (the kernel doubles it) keeps the two copies a few hundred KiB
 * apart: 1.6 to 1.7 GB/s there, and 2.2 to 2.3 instead of 1.2 to 1.4 at
 * 4 MiB; 2 ranks, each on its own core, were even up to 4 MiB and 3 to 12%
 * ahead from 8 MiB. 1 MiB was no better than 4 MiB, 64 KiB behind 256 KiB.
 * The receive buffer stays large: limiting it instead halved the speed.
 * Returns the bytes to set, or 0 to leave the socket as created (a peer on
 * another host, or `overridden` by DTRAIN_SOCKET_BUFFER).
 */
#define LOCAL_SNDBUF (256u << 10)

int dt_tcp_sndbuf(bool same_host, bool overridden)
{
    return same_host && !overridden ? (int)LOCAL_SNDBUF : 0;
}

/*
 * The most bytes one send(2) hands over: the wait policy's pieces (for the 4 MiB buffers),
 * unless the small send buffer towards a rank on this host (`sndbuf` > 0) bounds each send
 * already. There the pieces only cost: 2 ranks on their own cores, four rounds alternating,
 * were 1 to 13% faster without them at every size from 512 KiB to 8 MiB in every round
 * (7.4 to 7.7 GB/s against 6.7 to 6.9 at 4 MiB).
 */
size_t dt_tcp_send_max(size_t policy_max, int sndbuf)
{
    return sndbuf > 0 ? 0 : policy_max;
}

/*
 * Spinning pays only while the awaited rank runs on another core. One that
 * last ran on the waiter's core needs that core: the waiter yields it, which
 * hands it over without a trip through the futex. (Yielding while the peer
 * is elsewhere would hand the core to unrelated work for a whole time
 * slice.) After its budget a waiter sleeps on the futex.
 */
#define SPIN_NS 50000
#define YIELD_NS 50000

/*
 * A tcp transfer sends and receives in one loop. Handing the kernel a whole
 * segment in one send(2) (a megabyte or more) keeps the loop from receiving
 * and reducing until it is copied; 256 KiB at a time interleaves the two.
 * With 2 ranks, each on its own core, that was 1.2 to 2 times as fast from
 * 2 to 8 MiB over loopback (64 KiB pieces cost more calls than they saved).
 * Oversubscribed ranks do better handing over all they can while they have
 * the core, so they are not limited.
 */
#define SEND_MAX (256u << 10)

struct dt_wait_policy dt_wait_policy(long ncpu, int local_ranks)
{
    struct dt_wait_policy w = {.spin_ns = SPIN_NS, .yield_ns = YIELD_NS, .send_max = SEND_MAX};
    /* Oversubscribed: a spinning rank may hold the core another rank needs. */
    if (ncpu < local_ranks) {
        w.oversub = true;
        w.spin_ns = SPIN_NS / 10;
        w.send_max = 0;
    }
    return w;
}
