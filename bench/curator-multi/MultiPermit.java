// SPDX-License-Identifier: Apache-2.0
// bench/curator-multi — Curator's side of the peer benchmark's scenario m (leases of several permits at
// once), which ../shared/peers/curator/LockBench.java does not have. Same flags and JSON lines as the
// runner contract (../shared/peers/README.md), lib "curator"; run by bench/curator-multi/run.sh.
//
//   java MultiPermit --zk 127.0.0.1:22810 [--dur 10] [--warm 500] [--scen m] [--tag TEXT] (other contract
//   flags accepted and ignored)
//
// Scenario m (the same in bench/peer_runner/semaphore.cpp): N = 8 permits, 16 clients (each its own
// CuratorFramework and InterProcessSemaphoreV2 on one path); client t asks for k = 1 + t % 3 permits at
// a time with acquire(k, 60 s) (null = a stall), holds 0 ms or 5 ms, returnAll(); DUR s per variant. A
// shared counter of the permits held (k added after acquire returns, checked <= N, k subtracted before
// returnAll) counts violations. cpu_window_ms: the process's CPU (every thread: client, JIT, GC) in the
// timed window. Prints nothing (exit 0) when --scen has no m.
import java.io.*;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class MultiPermit {
    static String ZK = "127.0.0.1:22810", TAG = "";
    static int WARM = 500, DUR = 10, SESSION_MS = 30000;
    static Set<String> SCEN = new HashSet<>(Collections.singletonList("m"));
    static String BASE = "/bench/curator/" + ProcessHandle.current().pid();
    static String LIBVER = "?";
    static final long STALL_S = 60;
    static final int T = 16, PERMITS = 8;

    static int want(int t) { return 1 + t % 3; }

    static void log(String s) { System.err.println("[curator-multi] " + s); System.err.flush(); }

    static CuratorFramework newClient(String cs) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(cs)
                .sessionTimeoutMs(SESSION_MS).connectionTimeoutMs(15000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10)).build();
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException("connect timeout " + cs);
        return c;
    }

    static List<CuratorFramework> newClients(int n) throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(Math.min(n, 8));
        List<Future<CuratorFramework>> fs = new ArrayList<>();
        for (int i = 0; i < n; i++) fs.add(ex.submit(() -> newClient(ZK)));
        List<CuratorFramework> out = new ArrayList<>();
        for (Future<CuratorFramework> f : fs) out.add(f.get());
        ex.shutdown();
        return out;
    }

    static void closeAll(Collection<CuratorFramework> cs) { for (CuratorFramework c : cs) c.close(); }

    /** lease and lock nodes under a recipe path (as LockBench.leafCount) */
    static int leafCount(CuratorFramework c, String path) throws Exception {
        if (c.checkExists().forPath(path) == null) return 0;
        int n = 0;
        for (String ch : c.getChildren().forPath(path)) {
            String p = path + "/" + ch;
            org.apache.zookeeper.data.Stat st = c.checkExists().forPath(p);
            if (st == null) continue;
            if (st.getEphemeralOwner() != 0 || st.getNumChildren() == 0 && ch.matches(".*\\d{10}$")) n++;
            else n += leafCount(c, p);
        }
        return n;
    }

    static String fourlw(String hostport, String word) {
        String[] hp = hostport.split(":");
        try (Socket s = new Socket(hp[0], Integer.parseInt(hp[1]))) {
            s.getOutputStream().write(word.getBytes(StandardCharsets.US_ASCII));
            s.shutdownOutput();
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) { return ""; }
    }

    static final class LongArr {
        long[] a = new long[1024]; int n;
        synchronized void add(long v) { if (n == a.length) a = Arrays.copyOf(a, n * 2); a[n++] = v; }
        long[] sorted() { long[] b = Arrays.copyOf(a, n); Arrays.sort(b); return b; }
    }

    static double pct(long[] s, double p) { // nearest rank, ns -> us
        if (s.length == 0) return Double.NaN;
        int i = (int) Math.ceil(p / 100.0 * s.length) - 1;
        return s[Math.max(0, Math.min(s.length - 1, i))] / 1000.0;
    }
    static double mean(long[] s) { if (s.length == 0) return Double.NaN; double t = 0; for (long v : s) t += v; return t / s.length / 1000.0; }

    static long processCpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static final class J {
        StringBuilder sb = new StringBuilder("{"); boolean first = true;
        J(String scen) { s("lib", "curator").s("lib_version", LIBVER).s("scenario", scen); if (!TAG.isEmpty()) s("tag", TAG); }
        J k(String k) { if (!first) sb.append(','); first = false; sb.append('"').append(k).append("\":"); return this; }
        J s(String k, String v) { k(k); sb.append('"').append(v.replace("\\", "\\\\").replace("\"", "\\\"")).append('"'); return this; }
        J n(String k, double v) { k(k); sb.append(Double.isNaN(v) || Double.isInfinite(v) ? "null" : String.format(Locale.ROOT, "%.1f", v)); return this; }
        J i(String k, long v) { k(k); sb.append(v); return this; }
        J b(String k, boolean v) { k(k); sb.append(v); return this; }
        J lat(String prefix, long[] sorted) { return n(prefix + "p50_us", pct(sorted, 50)).n(prefix + "p99_us", pct(sorted, 99)).n(prefix + "mean_us", mean(sorted)); }
        void emit() { System.out.println(sb.append('}')); System.out.flush(); }
    }

    static void sleepNs(long ns) { try { Thread.sleep(ns / 1_000_000, (int) (ns % 1_000_000)); } catch (InterruptedException e) { Thread.currentThread().interrupt(); } }

    // ---------------------------------------------------------------- per-process warm-up (JIT)
    /** As LockBench's: WARM uncontended cycles, then ~1 s of 4-client contention, here on a scratch
     *  multi-permit semaphore (k = 1, 2, 3, 1: too few partial holders to wedge it, see below). */
    static void warmProcess() throws Exception {
        List<CuratorFramework> cs = newClients(4);
        String path = BASE + "/m-warm";
        InterProcessSemaphoreV2 s0 = new InterProcessSemaphoreV2(cs.get(0), path, PERMITS);
        for (int i = 0; i < WARM; i++) { Collection<Lease> l = s0.acquire(want(i), 10, TimeUnit.SECONDS); if (l != null) s0.returnAll(l); }
        long end = System.nanoTime() + 1_000_000_000L;
        Thread[] th = new Thread[4];
        for (int t = 0; t < 4; t++) {
            final int k = want(t);
            InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(cs.get(t), path, PERMITS);
            th[t] = new Thread(() -> { try { while (System.nanoTime() < end) { Collection<Lease> l = s.acquire(k, 10, TimeUnit.SECONDS); if (l != null) s.returnAll(l); } } catch (Exception e) { log("warm " + e); } });
            th[t].start();
        }
        for (Thread x : th) x.join();
        closeAll(cs);
    }

    // ---------------------------------------------------------------- (m) leases of several permits
    // Curator's acquire(k, ...) takes k leases one after the other, each under the recipe's internal
    // mutex (path/locks), and keeps the ones it has while it waits for the next: with 16 clients the
    // permits can all end up partly held by clients queued on that mutex while its holder waits for a
    // permit; then nothing moves until acquire's timeout (60 s here) returns someone's leases. Such a
    // wait is counted as a stall (and shows in duration_s). The clients' warm-up acquires, before the
    // window, go one at a time so that the window is not preceded by such a wait.
    static void scenMulti(int holdMs) throws Exception {
        final long holdNs = holdMs * 1_000_000L;
        String path = BASE + "/m-sem-multi-hold" + holdMs;
        List<CuratorFramework> cs = newClients(T);
        AtomicInteger cur = new AtomicInteger(), maxCur = new AtomicInteger(), viol = new AtomicInteger(), stalls = new AtomicInteger();
        AtomicLong n = new AtomicLong(), permits = new AtomicLong(); AtomicBoolean failed = new AtomicBoolean();
        LongArr all = new LongArr();
        AtomicLong firstStallNs = new AtomicLong();
        CyclicBarrier bar = new CyclicBarrier(T + 1);
        long[] deadline = new long[1];
        Object warmLock = new Object();
        Thread[] th = new Thread[T];
        for (int t = 0; t < T; t++) {
            final int k = want(t);
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(cs.get(t), path, PERMITS);
            th[t] = new Thread(() -> {
                try {
                    synchronized (warmLock) { // warm-up (also creates the parents), one client at a time: together they would wedge
                        Collection<Lease> w = sem.acquire(k, STALL_S, TimeUnit.SECONDS);
                        if (w != null) sem.returnAll(w);
                    }
                    bar.await(); bar.await();
                    while (System.nanoTime() < deadline[0]) {
                        long s = System.nanoTime();
                        Collection<Lease> l = sem.acquire(k, STALL_S, TimeUnit.SECONDS);
                        if (l == null) { stalls.incrementAndGet(); firstStallNs.compareAndSet(0, s); continue; }
                        long a = System.nanoTime();
                        if (l.size() != k) throw new IllegalStateException(l.size() + " leases, asked " + k);
                        int c = cur.addAndGet(k); maxCur.accumulateAndGet(c, Math::max); if (c > PERMITS) viol.incrementAndGet();
                        if (holdNs > 0) sleepNs(holdNs);
                        cur.addAndGet(-k);
                        sem.returnAll(l);
                        n.incrementAndGet(); permits.addAndGet(k); all.add(a - s);
                    }
                } catch (Exception e) { failed.set(true); log("m thread error " + e); }
            });
            th[t].start();
        }
        bar.await(); deadline[0] = System.nanoTime() + DUR * 1_000_000_000L; long t0 = System.nanoTime(); long c0 = processCpuNs(); bar.await();
        for (Thread x : th) x.join();
        double el = (System.nanoTime() - t0) / 1e9; long cpuNs = processCpuNs() - c0;
        long[] w = all.sorted();
        long fs = firstStallNs.get();
        new J("m_semaphore_multi_hold" + holdMs).i("clients", T).i("permits", PERMITS).s("permits_per_lease", "1+t%3")
                .n("hold_ms", holdNs / 1e6).n("duration_s", el)
                .i("acquisitions", n.get()).i("permits_granted", permits.get())
                .n("leases_s", n.get() / el).n("permits_s", permits.get() / el).lat("wait_", w)
                .i("max_concurrent_permits", maxCur.get()).i("violations", viol.get()).i("stalls", stalls.get())
                .n("first_stall_after_s", fs == 0 ? Double.NaN : (fs - t0) / 1e9).b("errors", failed.get())
                .n("cpu_window_ms", cpuNs / 1e6).n("cpu_us_per_acq", n.get() > 0 ? cpuNs / 1e3 / n.get() : Double.NaN)
                .i("leftover_nodes", leafCount(cs.get(0), path)).emit();
        closeAll(cs);
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            String k = args[i], v = args[i + 1];
            switch (k) {
                case "--zk": ZK = v; break;
                case "--dur": DUR = Integer.parseInt(v); break;
                case "--warm": WARM = Integer.parseInt(v); break;
                case "--tag": TAG = v; break;
                case "--scen": SCEN = new HashSet<>(Arrays.asList(v.split(","))); break;
                case "--proxy": case "--ctrl": case "--n": case "--threads": case "--herd": break;
                default: throw new IllegalArgumentException(k);
            }
        }
        if (!SCEN.contains("m")) System.exit(0);
        try (InputStream in = InterProcessMutex.class.getResourceAsStream("/META-INF/maven/org.apache.curator/curator-recipes/pom.properties")) {
            Properties pp = new Properties(); pp.load(in); LIBVER = pp.getProperty("version", "?");
        } catch (Exception e) { }
        String srv = fourlw(ZK, "srvr").split("\n")[0];
        new J("env").s("zk_client", org.apache.zookeeper.Version.getFullVersion()).s("server", srv)
                .s("java", System.getProperty("java.version")).i("session_timeout_ms", SESSION_MS)
                .s("runner", "bench/curator-multi")
                .s("loadavg", new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("/proc/loadavg"))).trim()).emit();
        long T0 = System.nanoTime();
        log("process warm-up"); warmProcess();
        log("m hold 0"); scenMulti(0);
        log("m hold 5ms"); scenMulti(5);
        log(String.format("done in %.1fs", (System.nanoTime() - T0) / 1e9));
        System.exit(0);
    }
}
