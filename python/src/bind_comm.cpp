// longseq._core: this process's rank of an MPI world (comm::open_world) and the Group's
// collectives on tensors, written in place where the collective allows.
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "bindings.hpp"
#include "device.hpp"
#include "longseq/comm/group.hpp"
#include "longseq/comm/launch.hpp"
#include "longseq/comm/nccl_backend.hpp"

namespace longseq::python {

namespace {

// One process's world; closed by close() (longseq/comm.py calls it at exit) or released.
class PyWorld {
 public:
  explicit PyWorld(std::unique_ptr<comm::OpenWorld> w) : w_(std::move(w)) {}
  comm::Group group() {
    if (closed_) value_error("longseq.comm: the world is closed");
    return w_->group();
  }
  void fail(const std::string& message) {
    if (!closed_) w_->fail(message);
  }
  void close() {
    if (closed_) return;
    closed_ = true;
    py::gil_scoped_release nogil;
    w_->close();
  }

 private:
  std::unique_ptr<comm::OpenWorld> w_;
  bool closed_ = false;
};

comm::ReduceOp reduce_op(const std::string& op) {
  if (op == "sum") return comm::ReduceOp::sum;
  if (op == "max") return comm::ReduceOp::max;
  value_error("longseq.comm: reduce op '", op, "': expected sum or max");
}

// A tensor a collective moves: contiguous, in host memory unless the backend moves device
// memory (comm refuses what it cannot move, naming the buffer). A CUDA tensor is exported for the
// legacy default stream, which the nccl backend's stream waits for before it reads or writes
// (comm/nccl/group.cpp); the collective has completed when the call returns.
Array comm_array(const py::object& obj, const char* name, const char* fn) {
  Array a = from_python(fn, obj, name, kLegacyStream);
  a.need_contiguous(fn);
  if (a.dtype == core::DType::boolean) a.dtype = core::DType::u8;
  return a;
}

void check_member(const comm::Group& g, int rank, const char* what) {
  if (rank < 0 || rank >= g.size())
    value_error("longseq.comm: ", what, " ", rank, " is not a rank of a group of ", g.size());
}

}  // namespace

void bind_comm(py::module_& m) {
  py::class_<comm::Group>(m, "Group", "A communicator (comm/group.hpp): a value type.")
      .def_property_readonly("rank", &comm::Group::rank)
      .def_property_readonly("size", &comm::Group::size)
      .def_property_readonly("backend",
                             [](const comm::Group& g) { return std::string(g.backend()); })
      .def_property_readonly("node", &comm::Group::node)
      .def_property_readonly("nodes", [](const comm::Group& g) { return g.topology().num_nodes(); })
      .def("barrier",
           [](const comm::Group& g) {
             py::gil_scoped_release nogil;
             g.barrier();
           })
      .def(
          "split",
          [](const comm::Group& g, int color, int key) {
            if (color < 0 && color != comm::Group::kUndefined)
              value_error("longseq.comm: split color ", color, " must be >= 0 (or -1: none)");
            py::gil_scoped_release nogil;
            return g.split(color, key);
          },
          py::arg("color"), py::arg("key") = 0)
      .def(
          "all_reduce",
          [](const comm::Group& g, const py::object& x, const std::string& op) {
            const Array a = comm_array(x, "x", "longseq.comm.all_reduce");
            const comm::ReduceOp r = reduce_op(op);
            py::gil_scoped_release nogil;
            g.all_reduce(a.data, a.data, static_cast<size_t>(a.numel()), a.dtype, r);
          },
          py::arg("x"), py::arg("op") = "sum")
      .def(
          "broadcast",
          [](const comm::Group& g, const py::object& x, int root) {
            const Array a = comm_array(x, "x", "longseq.comm.broadcast");
            check_member(g, root, "root");
            py::gil_scoped_release nogil;
            g.broadcast(a.data, static_cast<size_t>(a.numel()), a.dtype, root);
          },
          py::arg("x"), py::arg("root") = 0)
      .def(
          "all_gather",
          [](const comm::Group& g, const py::object& x, const py::object& out) {
            constexpr const char* fn = "longseq.comm.all_gather";
            const Array a = comm_array(x, "x", fn), o = comm_array(out, "out", fn);
            if (o.dtype != a.dtype || o.numel() != a.numel() * g.size())
              value_error(fn, ": out holds ", o.numel(), " ", dtype_str(o.dtype), ", expected ",
                          a.numel() * g.size(), " ", dtype_str(a.dtype), " (", g.size(),
                          " ranks of x ", a.shape_str(), ")");
            no_overlap(fn, {&o}, {&a});
            py::gil_scoped_release nogil;
            g.all_gather(a.data, o.data, static_cast<size_t>(a.numel()), a.dtype);
          },
          py::arg("x"), py::arg("out"))
      .def("stats", [](const comm::Group& g) { return g.stats().to_json().dump(); })
      .def("__repr__", [](const comm::Group& g) {
        return core::cat("<longseq.comm.Group rank ", g.rank(), " of ", g.size(), ", ", g.backend(),
                         ">");
      });

  py::class_<PyWorld>(m, "World", "This process's rank of a world held open (comm::open_world).")
      .def_property_readonly("group", &PyWorld::group)
      .def("fail", &PyWorld::fail, py::arg("message"))
      .def("close", &PyWorld::close);
  m.def(
      "open_world",
      [](const std::string& backend, double timeout, int nodes) {
        if (!(timeout > 0)) value_error("longseq.comm: timeout ", timeout, " s must be positive");
        if (nodes < 0) value_error("longseq.comm: nodes ", nodes, " must be >= 0");
        comm::Options opt;
        opt.backend = backend;
        opt.timeout_s = timeout;
        opt.nodes = nodes;
        std::unique_ptr<comm::OpenWorld> w;
        {
          py::gil_scoped_release nogil;
          w = comm::open_world(opt);
        }
        return PyWorld(std::move(w));
      },
      py::arg("backend") = "any", py::arg("timeout") = 300.0, py::arg("nodes") = 0);
  m.def("launched_by_mpirun", &comm::launched_by_mpirun);
  // The nccl world of longseq.comm.nccl(): the id travels over the caller's torch.distributed
  // group (longseq/comm.py), so no MPI is involved.
  m.def("nccl_built", &comm::nccl_built);
  m.def("nccl_unique_id", [] { return py::bytes(comm::nccl_unique_id()); });
  m.def(
      "open_nccl_world",
      [](const py::bytes& id, int rank, const std::vector<int>& node_of_rank, int device,
         double timeout) {
        // The id, rank, device and timeout are comm::open_nccl_world's to check; the node ids
        // are longseq/comm.py's dense ones, which Topology would otherwise renumber silently.
        const int n = static_cast<int>(node_of_rank.size());
        if (n == 0)  // a Topology of no ranks is a broken invariant (an abort), not an error
          value_error("longseq.comm.nccl: nodes is empty: one node id per rank");
        for (int r = 0; r < n; ++r)
          if (node_of_rank[static_cast<size_t>(r)] < 0 || node_of_rank[static_cast<size_t>(r)] >= n)
            value_error("longseq.comm.nccl: node ", node_of_rank[static_cast<size_t>(r)],
                        " of rank ", r, " is not in [0, ", n, ")");
        const std::string bytes = id;
        const comm::Topology topo(node_of_rank);
        std::unique_ptr<comm::OpenWorld> w;
        {
          py::gil_scoped_release nogil;
          w = comm::open_nccl_world(bytes, rank, topo, device, timeout);
        }
        return PyWorld(std::move(w));
      },
      py::arg("id"), py::arg("rank"), py::arg("nodes"), py::arg("device"),
      py::arg("timeout") = 300.0);
}

}  // namespace longseq::python
