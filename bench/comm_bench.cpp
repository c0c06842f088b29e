// Communication benchmark: point-to-point and all-gather bandwidth and latency, 1 KiB .. 64 MiB,
// for the local backend (threads) and MPI (run under mpirun), written as JSON.
//
// Definitions follow nccl-tests (doc/PERFORMANCE.md):
//   sendrecv    every rank sends `bytes` to rank+1 and receives `bytes` from rank-1 at once.
//               algBw = bytes / time, busBw = algBw.
//   pingpong    rank 0 sends `bytes` to rank 1, which sends them back; time = half the round
//               trip (the one-way latency at small sizes). algBw = busBw = bytes / time.
//   all_gather  `bytes` is the size of the gathered output (P blocks of bytes/P).
//               algBw = bytes / time, busBw = algBw * (P-1)/P.
// time is the slowest rank's mean over `iters` iterations after one warm-up, with iterations
// chosen so each point runs about --seconds.
//
//   comm_bench                                       # 4 local threads, no link model
//   comm_bench --world 4 --nodes 2 --link "inter=10us,10GB/s"
//   mpirun -np 4 comm_bench                          # MPI (backend any picks it)
//   mpirun -np 4 comm_bench --raw-mpi                # + plain MPI_Sendrecv / MPI_Allgather /
//                                                    #   MPI_Send+Recv of the same sizes, same run
// With --raw-mpi the JSON also holds "raw_mpi" (the same points measured with plain MPI calls on
// MPI_COMM_WORLD from the main thread, between our worlds) and "vs_raw" (our busBw / raw busBw per
// op and size: the comm layer's overhead over MPI itself). Ours and raw alternate --reps times per
// point and each side reports its median repetition ("repetitions" keeps every time), so load
// that comes and goes on a shared machine hits both sides alike. "loadavg" is /proc/loadavg
// before and after.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "longseq/comm/cli_options.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/core/timer.hpp"

#ifdef LONGSEQ_BENCH_RAW_MPI
#include <mpi.h>
#endif

namespace {

using namespace longseq;

struct Point {
  std::string op;
  size_t bytes;
  int iters;
  double seconds;       // per iteration, slowest rank
  double algbw, busbw;  // bytes/s
};

/// Fills a timed point: a point-to-point op moves `pt.bytes` per `seconds` (pingpong passes half
/// its round trip); an all-gather of `p` blocks of `block` bytes, busBw = algBw (p-1)/p.
void fill_p2p(Point& pt, int iters, double seconds) {
  pt.iters = iters;
  pt.seconds = seconds;
  pt.algbw = pt.busbw = static_cast<double>(pt.bytes) / seconds;
}
void fill_all_gather(Point& pt, size_t block, int p, int iters, double seconds) {
  pt.bytes = block * static_cast<size_t>(p);
  pt.iters = iters;
  pt.seconds = seconds;
  pt.algbw = static_cast<double>(pt.bytes) / seconds;
  pt.busbw = pt.algbw * (p - 1) / p;
}

/// Runs `body` once, then `iters` times, where iters makes the run last about `target` seconds;
/// returns the slowest rank's mean seconds per iteration. Every rank gets the same answer.
template <class F>
std::pair<int, double> time_it(comm::Group& g, double target, int max_iters, F&& body) {
  g.barrier();
  core::Timer t;
  body();
  double once = t.elapsed();
  g.all_reduce(&once, &once, 1, core::DType::f64, comm::ReduceOp::max);
  const int iters = std::clamp(static_cast<int>(target / std::max(once, 1e-7)), 3, max_iters);
  g.barrier();
  t.restart();
  for (int i = 0; i < iters; ++i) body();
  double mean = t.elapsed() / iters;
  g.all_reduce(&mean, &mean, 1, core::DType::f64, comm::ReduceOp::max);
  return {iters, mean};
}

#ifdef LONGSEQ_BENCH_RAW_MPI
/// time_it with plain MPI on MPI_COMM_WORLD.
template <class F>
std::pair<int, double> time_raw(double target, int max_iters, F&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  core::Timer t;
  body();
  double once = t.elapsed();
  MPI_Allreduce(MPI_IN_PLACE, &once, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const int iters = std::clamp(static_cast<int>(target / std::max(once, 1e-7)), 3, max_iters);
  MPI_Barrier(MPI_COMM_WORLD);
  t.restart();
  for (int i = 0; i < iters; ++i) body();
  double mean = t.elapsed() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {iters, mean};
}

/// One point with plain MPI_Sendrecv, MPI_Send/MPI_Recv or MPI_Allgather on MPI_COMM_WORLD.
Point raw_point(const std::string& op, size_t bytes, double seconds, int max_iters) {
  int p = 1, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  Point pt{op, bytes, 0, 0.0, 0.0, 0.0};
  const int n = static_cast<int>(bytes);
  if (op == "sendrecv") {
    std::vector<std::byte> s(bytes), d(bytes);
    auto [it, t] = time_raw(seconds, max_iters, [&] {
      MPI_Sendrecv(s.data(), n, MPI_BYTE, (r + 1) % p, 0, d.data(), n, MPI_BYTE, (r + p - 1) % p, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    });
    fill_p2p(pt, it, t);
  } else if (op == "pingpong") {
    std::vector<std::byte> b(bytes);
    auto [it, t] = time_raw(seconds, max_iters, [&] {
      if (r == 0) {
        MPI_Send(b.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(b.data(), n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (r == 1) {
        MPI_Recv(b.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(b.data(), n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    });
    fill_p2p(pt, it, t / 2);
  } else if (op == "all_gather") {
    const size_t block = bytes / static_cast<size_t>(p);
    std::vector<std::byte> in(block), outb(block * static_cast<size_t>(p));
    auto [it, t] = time_raw(seconds, max_iters, [&] {
      MPI_Allgather(in.data(), static_cast<int>(block), MPI_BYTE, outb.data(),
                    static_cast<int>(block), MPI_BYTE, MPI_COMM_WORLD);
    });
    fill_all_gather(pt, block, p, it, t);
  }
  return pt;
}
#endif

/// One point through the comm layer (every rank returns the same Point).
Point our_point(comm::Group& g, const std::string& op, size_t bytes, double seconds,
                int max_iters) {
  const int p = g.size(), r = g.rank();
  Point pt{op, bytes, 0, 0.0, 0.0, 0.0};
  if (op == "sendrecv") {
    std::vector<std::byte> s(bytes), d(bytes);
    auto [it, t] = time_it(g, seconds, max_iters, [&] {
      const comm::SendSpec sp{g.ring_next(), s.data(), bytes, 0};
      const comm::RecvSpec rp{g.ring_prev(), d.data(), bytes, 0};
      g.exchange({&sp, 1}, {&rp, 1});
    });
    fill_p2p(pt, it, t);
  } else if (op == "pingpong") {
    std::vector<std::byte> b(bytes);
    auto [it, t] = time_it(g, seconds, max_iters, [&] {
      if (r == 0) {
        g.send(1, b.data(), bytes);
        g.recv(1, b.data(), bytes);
      } else if (r == 1) {
        g.recv(0, b.data(), bytes);
        g.send(0, b.data(), bytes);
      }
    });
    fill_p2p(pt, it, t / 2);
  } else if (op == "all_gather") {
    const size_t block = bytes / static_cast<size_t>(p);
    std::vector<std::byte> in(block), outb(block * static_cast<size_t>(p));
    auto [it, t] = time_it(g, seconds, max_iters,
                           [&] { g.all_gather(in.data(), outb.data(), block, core::DType::u8); });
    fill_all_gather(pt, block, p, it, t);
  } else {
    core::fail("bench", "unknown op '", op, "': expected pingpong, sendrecv or all_gather");
  }
  return pt;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  std::getline(f, line);
  return line;
}

void print_point(const char* prefix, const Point& pt) {
  std::fprintf(stderr, "%s%-10s %10zu B  %6d it  %10.2f us  algBw %8.3f GB/s  busBw %8.3f GB/s\n",
               prefix, pt.op.c_str(), pt.bytes, pt.iters, pt.seconds * 1e6, pt.algbw / 1e9,
               pt.busbw / 1e9);
}

/// The repetition with the median time (reps are few and odd by default).
Point median(std::vector<Point> reps) {
  std::sort(reps.begin(), reps.end(),
            [](const Point& a, const Point& b) { return a.seconds < b.seconds; });
  return reps[reps.size() / 2];
}

nlohmann::json points_json(const std::vector<Point>& points) {
  nlohmann::json res = nlohmann::json::array();
  for (const Point& pt : points)
    res.push_back({{"op", pt.op},
                   {"bytes", pt.bytes},
                   {"iters", pt.iters},
                   {"time_us", pt.seconds * 1e6},
                   {"algbw_GBps", pt.algbw / 1e9},
                   {"busbw_GBps", pt.busbw / 1e9}});
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"comm_bench: point-to-point and all-gather bandwidth/latency (JSON)"};
  comm::Options opt;
  std::string out_path, ops_list = "pingpong,sendrecv,all_gather";
  size_t min_bytes = 1024, max_bytes = 64u << 20;
  double seconds = 0.2;
  int max_iters = 2000, step = 4;
  comm::add_cli_options(app, opt);
  app.add_option("--ops", ops_list, "comma list of pingpong, sendrecv, all_gather")
      ->capture_default_str();
  app.add_option("--min-bytes", min_bytes, "smallest size")->capture_default_str();
  app.add_option("--max-bytes", max_bytes, "largest size")->capture_default_str();
  app.add_option("--step", step, "size multiplier between points")->capture_default_str();
  app.add_option("--seconds", seconds, "target seconds per point")->capture_default_str();
  app.add_option("--max-iters", max_iters, "iteration cap per point")->capture_default_str();
  app.add_option("--out", out_path, "write JSON here (default: stdout)");
  bool raw = false;
  int reps = 5;
  app.add_flag("--raw-mpi", raw, "also measure plain MPI calls of the same sizes (under mpirun)");
  app.add_option("--reps", reps,
                 "with --raw-mpi: ours and raw alternate this many times per point, each "
                 "repetition running --seconds/reps; the median repetition is reported")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (opt.world == 0 && comm::resolve_backend(opt.backend).name == "local") opt.world = 4;
    std::vector<std::string> ops;
    std::stringstream ss(ops_list);
    for (std::string s; std::getline(ss, s, ',');) ops.push_back(s);

    nlohmann::json report;
    if (!raw) {
      comm::run(opt, [&](comm::Group& g) {
        std::vector<Point> points;
        for (const std::string& op : ops) {
          if (op == "pingpong" && g.size() < 2) continue;
          for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= static_cast<size_t>(step)) {
            points.push_back(our_point(g, op, bytes, seconds, max_iters));
            if (g.rank() == 0) print_point("", points.back());
          }
        }
        const std::vector<comm::Stats> stats = g.gather_stats();
        if (g.rank() == 0)
          report = {{"bench", "comm"},
                    {"backend", std::string(g.backend())},
                    {"world", g.size()},
                    {"nodes", g.topology().num_nodes()},
                    {"link", opt.link.str()},
                    {"results", points_json(points)},
                    {"stats", comm::stats_to_json(stats)}};
      });
    } else {
#ifdef LONGSEQ_BENCH_RAW_MPI
      core::require(comm::resolve_backend(opt.backend).name == "mpi", "bench",
                    "--raw-mpi needs the MPI backend (run under mpirun)");
      core::require(reps >= 1, "bench", "--reps ", reps, " must be >= 1");
      // Ours and raw alternate per point, `reps` times each, and each side reports its median
      // repetition: on a shared machine the load changes within seconds, and measuring all of
      // ours first and all of raw after (as this bench once did) turned load into ratios. The raw
      // calls run on MPI_COMM_WORLD from this thread between our worlds, never while one runs
      // (our progress thread owns MPI then).
      int p = 0, wr = 0;
      std::vector<std::string> loads{loadavg()};
      std::vector<Point> ours, rawp;
      nlohmann::json reps_json = nlohmann::json::array();
      for (const std::string& op : ops) {
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= static_cast<size_t>(step)) {
          std::vector<Point> o, w;
          for (int k = 0; k < reps; ++k) {
            comm::run(opt, [&](comm::Group& g) {
              p = g.size();
              wr = g.rank();
              if (op == "pingpong" && p < 2) return;
              o.push_back(our_point(g, op, bytes, seconds / reps, max_iters));
            });
            if (o.empty()) break;
            w.push_back(raw_point(op, bytes, seconds / reps, max_iters));
            if (wr == 0) {
              print_point("ours ", o.back());
              print_point("raw  ", w.back());
            }
          }
          if (o.empty()) break;
          ours.push_back(median(o));
          rawp.push_back(median(w));
          nlohmann::json one = {{"op", op}, {"bytes", o.front().bytes}};
          for (size_t k = 0; k < o.size(); ++k) {
            one["ours_time_us"].push_back(o[k].seconds * 1e6);
            one["raw_time_us"].push_back(w[k].seconds * 1e6);
          }
          reps_json.push_back(one);
        }
      }
      if (wr == 0) {
        loads.push_back(loadavg());
        nlohmann::json vs = nlohmann::json::array();
        for (size_t i = 0; i < rawp.size(); ++i)
          vs.push_back({{"op", rawp[i].op},
                        {"bytes", rawp[i].bytes},
                        {"ours_busbw_GBps", ours[i].busbw / 1e9},
                        {"raw_busbw_GBps", rawp[i].busbw / 1e9},
                        {"ours_over_raw", ours[i].busbw / rawp[i].busbw}});
        report = {{"bench", "comm"},
                  {"backend", "mpi"},
                  {"world", p},
                  {"reps", reps},
                  {"results", points_json(ours)},
                  {"raw_mpi", points_json(rawp)},
                  {"repetitions", reps_json},
                  {"vs_raw", vs},
                  {"loadavg", loads}};
      }
#else
      core::fail("bench", "--raw-mpi: comm_bench was built without MPI");
#endif
    }
    if (!report.is_null()) {
      if (out_path.empty()) {
        std::cout << report.dump(2) << "\n";
      } else {
        std::ofstream(out_path) << report.dump(2) << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
