#pragma once
// Link model for the local backend (design.md §4): lets overlap and topology-aware schedules be
// measured on one machine by delaying the completion of local sends as a real network would.
//
// A link is one directed pair of ranks (src -> dst); its class is `intra` when both ranks are on
// the same node of the group's topology, `inter` otherwise. A send of b bytes posted at time t0
// starts at t = max(t0, time the link becomes free), occupies the link for latency + b/bandwidth,
// and neither the send nor its receive completes before t + latency + b/bandwidth. One transfer
// at a time per link, so two back-to-back sends on one link take twice as long; sends on
// different links (a rank sending to two peers) run concurrently. Sends to oneself are free.
//
// The model sleeps on a condition variable until the completion time: it never spins, so it does
// not slow the compute of other ranks.
//
// Text format (parse / str): `intra=LAT,BW:inter=LAT,BW`, either part optional, e.g.
//   "intra=2us,100GB/s:inter=10us,12.5GB/s"   "inter=50us,1GiB/s"   "none" (or "")
// LAT: a number with unit s | ms | us | ns (a bare number is seconds).
// BW:  a number with unit B/s | KB/s | MB/s | GB/s | TB/s (powers of 1000), KiB/s | MiB/s | GiB/s
//      (powers of 1024), Gb/s | Mb/s (bits, powers of 1000), or `inf`.
#include <string>
#include <string_view>

namespace longseq::comm {

/// Latency and bandwidth of one link class. Zero latency and infinite bandwidth add no delay.
struct LinkClass {
  double latency_s = 0.0;
  double bandwidth_Bps = 0.0;  ///< bytes per second; 0 means infinite
  /// latency + bytes / bandwidth.
  double seconds(double bytes) const {
    return latency_s + (bandwidth_Bps > 0.0 ? bytes / bandwidth_Bps : 0.0);
  }
  bool is_free() const { return latency_s == 0.0 && bandwidth_Bps == 0.0; }
};

/// Per-class link parameters. Default: no delay at all (enabled() is false).
struct LinkModel {
  LinkClass intra;
  LinkClass inter;

  bool enabled() const { return !intra.is_free() || !inter.is_free(); }
  const LinkClass& of(bool same_node) const { return same_node ? intra : inter; }

  /// Parses the text format above; throws core::Error naming the offending text.
  static LinkModel parse(std::string_view text);
  /// Canonical text form ("none" when disabled), e.g. "intra=2us,100GB/s:inter=10us,12.5GB/s".
  std::string str() const;
};

/// "5us" -> 5e-6. Throws core::Error("[comm] ...") on a bad number or unit.
double parse_duration(std::string_view text);
/// "10GB/s" -> 1e10; "inf" -> 0 (infinite). Throws core::Error on a bad number or unit.
double parse_bandwidth(std::string_view text);

}  // namespace longseq::comm
