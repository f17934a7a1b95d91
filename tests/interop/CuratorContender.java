// SPDX-License-Identifier: Apache-2.0
// A Curator contender for zklock's interop test (tests/integration/curator_interop_test.cpp): Apache
// Curator's own InterProcessMutex / InterProcessReadWriteLock on a lock path that zklock also uses.
//
//   java -cp CLASSES:JARS CuratorContender CONNECT LOCK_PATH MODE ITERATIONS RESOURCE
//
// MODE mutex | read | write | rw-mixed: connects, takes and releases the lock once (warm-up), prints
// READY, waits for a line "go" on stdin, then ITERATIONS times: acquire, hold the shared RESOURCE,
// release (rw-mixed picks read or write at random each time). Prints "DONE ..." and exits 0; prints
// "OVERLAP <what>" and exits 3 as soon as it meets a holder where there must be none; exits 1 on any
// other failure (the stack trace goes to stderr).
//
// MODE interactive (ITERATIONS and RESOURCE unused): two independent lock sets, slots 0 and 1, each
// an InterProcessMutex and an InterProcessReadWriteLock on LOCK_PATH, each driven by its own thread
// (Curator locks belong to the thread that took them). After READY, one command per stdin line:
//   <slot>.<mutex|read|write>.<try|lock|unlock>      answered "<slot> true|false" (try: no wait),
//                                                     "<slot> ok" (lock blocks; unlock), or
//                                                     "<slot> error <text>"
//   <slot>.<mutex|read|write>.revocable              makes that lock revocable (Curator's makeRevocable,
//                                                     before it is taken): a request prints "<slot>
//                                                     revoke requested", then the slot's thread releases
//                                                     it and prints "<slot> released on request"
//   revoke <node path>                               Curator's Revoker.attemptRevoke on a holder's node,
//                                                     answered "r ok" or "r error <text>"
//   quit                                             (lets commands already sent finish, 5 s at most)
// Answers of one slot come in order; a slot blocked in lock still lets the other slot work.
//
// The resource protocol, followed by the C++ contenders too. RESOURCE is a file holding a decimal
// count of exclusive holds. Beside it:
//   RESOURCE.holder        created with O_CREAT|O_EXCL semantics by an exclusive holder (mutex, writer)
//   RESOURCE.r.<o>-<uuid>  one per reader inside its hold (o: J = Curator, C = zklock)
//   RESOURCE.log           one appended line per hold: "<o> <pid> X" (exclusive) or "<o> <pid> R"
// An exclusive holder creates its marker (failing if it exists), checks that no reader marker exists,
// reads the count, works, writes count + 1, checks the readers again and deletes its marker. A reader
// creates its marker, checks that no holder marker exists, reads the count, works, checks again and
// deletes its marker. Each side checks after making its own marker and before removing it, so two
// holds that overlap for longer than a file deletion are caught; a lost update shows in the count.
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorContender {
  private static final String ORIGIN = "J";

  /** Another holder was inside where there must be none. */
  static final class Overlap extends Exception {
    Overlap(String what) {
      super(what);
    }
  }

  /** The shared resource and its marker files (see the protocol at the top). */
  static final class Resource {
    private final Path count;
    private final Path dir;
    private final Path holder;
    private final Path log;
    private final String readerPrefix;
    private final String pid = Long.toString(ProcessHandle.current().pid());
    long sharedWithZklock = 0; // read holds that met a zklock reader's marker

    Resource(Path file) {
      count = file.toAbsolutePath();
      dir = count.getParent();
      holder = dir.resolve(count.getFileName() + ".holder");
      log = dir.resolve(count.getFileName() + ".log");
      readerPrefix = count.getFileName() + ".r.";
    }

    void holdExclusive() throws IOException, InterruptedException, Overlap {
      try {
        Files.createFile(holder);
      } catch (FileAlreadyExistsException e) {
        throw new Overlap("exclusive hold: another exclusive holder's marker exists");
      }
      appendLog("X");
      expectNoReaders("on entry");
      final long n = readCount();
      Thread.sleep(1); // the work: widens the window in which an overlapping holder is caught
      Files.writeString(count, Long.toString(n + 1));
      expectNoReaders("on exit");
      try {
        Files.delete(holder);
      } catch (NoSuchFileException e) {
        throw new Overlap("exclusive hold: someone else deleted our holder marker");
      }
    }

    void holdShared() throws IOException, InterruptedException, Overlap {
      final Path mine = dir.resolve(readerPrefix + ORIGIN + "-" + UUID.randomUUID());
      Files.createFile(mine);
      appendLog("R");
      if (Files.exists(holder)) throw new Overlap("read hold: an exclusive holder's marker exists on entry");
      if (countReaders(readerPrefix + "C-") > 0) ++sharedWithZklock;
      readCount();
      Thread.sleep(1);
      if (Files.exists(holder)) throw new Overlap("read hold: an exclusive holder's marker exists on exit");
      Files.delete(mine);
    }

    private void expectNoReaders(String when) throws IOException, Overlap {
      final long n = countReaders(readerPrefix);
      if (n > 0) throw new Overlap("exclusive hold: " + n + " reader marker(s) exist " + when);
    }

    private long countReaders(String prefix) throws IOException {
      long n = 0;
      try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, p -> p.getFileName().toString().startsWith(prefix))) {
        for (Path p : ds) ++n;
      }
      return n;
    }

    private long readCount() throws IOException, Overlap {
      final String text = Files.readString(count).trim();
      try {
        return Long.parseLong(text);
      } catch (NumberFormatException e) {
        throw new Overlap("the count file reads \"" + text + "\" (being rewritten by another holder)");
      }
    }

    private void appendLog(String kind) throws IOException {
      Files.writeString(log, ORIGIN + " " + pid + " " + kind + "\n", StandardOpenOption.CREATE,
          StandardOpenOption.WRITE, StandardOpenOption.APPEND);
    }
  }

  public static void main(String[] args) {
    int rc;
    try {
      rc = run(args);
    } catch (Overlap e) {
      System.out.println("OVERLAP " + e.getMessage());
      rc = 3;
    } catch (Exception e) {
      e.printStackTrace();
      System.out.println("ERROR " + e);
      rc = 1;
    }
    System.out.flush();
    System.exit(rc);
  }

  private static int run(String[] a) throws Exception {
    if (a.length != 5) {
      System.err.println("usage: CuratorContender CONNECT LOCK_PATH mutex|read|write|rw-mixed|interactive ITERATIONS RESOURCE");
      return 2;
    }
    final String connect = a[0], path = a[1], mode = a[2];
    final int iterations = Integer.parseInt(a[3]);
    if (!mode.matches("mutex|read|write|rw-mixed|interactive")) throw new IllegalArgumentException("unknown mode " + mode);
    final BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    // Closing the client ends the session, so the server drops our nodes even after an OVERLAP.
    try (CuratorFramework client = CuratorFrameworkFactory.builder()
             .connectString(connect)
             .sessionTimeoutMs(5000)
             .connectionTimeoutMs(10000)
             .retryPolicy(new ExponentialBackoffRetry(100, 5))
             .build()) {
      client.start();
      if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) throw new IOException("no connection to " + connect);
      if (mode.equals("interactive")) return interactive(client, path, in);

      final InterProcessMutex mutex = new InterProcessMutex(client, path);
      final InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
      // Warm-up: load and run the lock code once before the race starts.
      for (InterProcessLock l : mode.equals("mutex") ? new InterProcessLock[] {mutex}
                                                     : new InterProcessLock[] {rw.writeLock(), rw.readLock()}) {
        l.acquire();
        l.release();
      }
      System.out.println("READY");
      System.out.flush();
      final String go = in.readLine();
      if (!"go".equals(go)) throw new IOException("expected \"go\" on stdin, got " + go);

      final Resource res = new Resource(Paths.get(a[4]));
      final Random random = new Random();
      long exclusive = 0, shared = 0;
      for (int i = 0; i < iterations; ++i) {
        final boolean write = switch (mode) {
          case "read" -> false;
          case "rw-mixed" -> random.nextBoolean();
          default -> true; // mutex, write
        };
        final InterProcessLock lock = mode.equals("mutex") ? mutex : write ? rw.writeLock() : rw.readLock();
        lock.acquire();
        try {
          if (write) {
            res.holdExclusive();
            ++exclusive;
          } else {
            res.holdShared();
            ++shared;
          }
        } finally {
          lock.release();
        }
      }
      System.out.println("DONE mode=" + mode + " iterations=" + iterations + " exclusive=" + exclusive
          + " shared=" + shared + " shared_with_zklock=" + res.sharedWithZklock);
      return 0;
    }
  }

  private static int interactive(CuratorFramework client, String path, BufferedReader in) throws Exception {
    final Map<String, InterProcessLock> locks = new HashMap<>();
    final Map<String, ExecutorService> threads = new HashMap<>();
    for (String slot : new String[] {"0", "1"}) {
      final InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
      locks.put(slot + ".mutex", new InterProcessMutex(client, path));
      locks.put(slot + ".read", rw.readLock());
      locks.put(slot + ".write", rw.writeLock());
      threads.put(slot, Executors.newSingleThreadExecutor());
    }
    System.out.println("READY");
    System.out.flush();
    try {
      for (String line; (line = in.readLine()) != null;) {
        final String cmd = line.trim();
        if (cmd.equals("quit")) break;
        if (cmd.startsWith("revoke ")) {
          try {
            Revoker.attemptRevoke(client, cmd.substring(7));
            answer("r", "ok");
          } catch (Exception e) {
            answer("r", "error " + e);
          }
          continue;
        }
        final int dot = cmd.lastIndexOf('.');
        final String slot = cmd.isEmpty() ? "?" : cmd.substring(0, 1);
        final InterProcessLock lock = dot < 0 ? null : locks.get(cmd.substring(0, dot));
        final String op = dot < 0 ? "" : cmd.substring(dot + 1);
        if (lock != null && op.equals("revocable")) {
          final ExecutorService thread = threads.get(slot);
          ((InterProcessMutex) lock).makeRevocable(revoked -> {
            answer(slot, "revoke requested");
            thread.execute(() -> { // released by the thread that took it, as Curator requires
              try {
                revoked.release();
                answer(slot, "released on request");
              } catch (Exception e) {
                answer(slot, "error " + e);
              }
            });
          });
          answer(slot, "ok");
          continue;
        }
        if (lock == null || !op.matches("try|lock|unlock")) {
          answer(slot, "error unknown command \"" + cmd + "\"");
          continue;
        }
        threads.get(slot).execute(() -> {
          try {
            switch (op) {
              case "try" -> answer(slot, Boolean.toString(lock.acquire(0, TimeUnit.MILLISECONDS)));
              case "lock" -> {
                lock.acquire();
                answer(slot, "ok");
              }
              default -> {
                lock.release();
                answer(slot, "ok");
              }
            }
          } catch (Exception e) {
            answer(slot, "error " + e);
          }
        });
      }
    } finally {
      for (ExecutorService t : threads.values()) t.shutdown(); // commands already sent still run
      for (ExecutorService t : threads.values())
        if (!t.awaitTermination(5, TimeUnit.SECONDS)) t.shutdownNow();
    }
    return 0;
  }

  private static synchronized void answer(String slot, String text) {
    System.out.println(slot + " " + text);
    System.out.flush();
  }
}
