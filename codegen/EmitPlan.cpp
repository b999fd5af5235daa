//===- EmitPlan.cpp - k3l module to the plan format -----------------------===//
//
// The last step of k3c: the planned launch IR becomes a PlanDoc
// (runtime/plan/Plan.h) and its text (docs/PLAN.md). The emitter validates what
// it wrote with the runtime's own validator, so a plan k3c writes is a plan
// k3-run accepts. The kernel report counts the bytes each launch moves per
// token with the runtime's launchBytes (runtime/plan/PlanBytes.h), the accounting
// the profiler and the decode benchmark use too.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"

#include "dialect/K3Dialect.h"
#include "kernels/PtxModules.h"

#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/plan/PlanBytes.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult mlir::k3::emitPlan(ModuleOp module, llvm::StringRef fusion,
                                 std::string &planText,
                                 std::vector<LaunchReport> *report) {
  auto configText = module->getAttrOfType<StringAttr>(kConfigAttrName);
  auto maxSeq = module->getAttrOfType<IntegerAttr>(kMaxSeqAttrName);
  auto arena = module->getAttrOfType<IntegerAttr>("k3l.arena_bytes");
  if (!configText || !maxSeq || !arena)
    return module.emitError() << "expects a module with " << kConfigAttrName
                              << ", " << kMaxSeqAttrName
                              << " and k3l.arena_bytes (run the importer, "
                                 "convert-k3-to-launch and k3-plan-buffers)";
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigText(configText.getValue().str(), "k3.config");
  if (!config)
    return module.emitError() << config.message();

  ::k3::PlanDoc doc;
  doc.fusion = fusion.str();
  doc.maxSeq = maxSeq.getInt();
  if (auto batch = module->getAttrOfType<IntegerAttr>(kMaxBatchAttrName))
    doc.maxBatch = batch.getInt();
  if (auto ranks = module->getAttrOfType<IntegerAttr>(kRanksAttrName))
    doc.ranks = ranks.getInt();
  if (auto rank = module->getAttrOfType<IntegerAttr>(kRankAttrName))
    doc.rank = rank.getInt();
  doc.config = *config;
  doc.arenaBytes = arena.getInt();

  auto fn = module.lookupSymbol<func::FuncOp>(kDecodeStepName);
  if (!fn)
    return module.emitError() << "expects a function @" << kDecodeStepName;
  DenseMap<Value, ::k3::PlanArg> bound;
  for (Operation &op : fn.getBody().front()) {
    if (auto a = dyn_cast<k3l::AllocOp>(op)) {
      if (!a.getOffset())
        return a.emitOpError() << "has no arena offset: run k3-plan-buffers";
      ::k3::PlanBuffer b;
      b.name = a.getName().str();
      b.offset = *a.getOffset();
      b.bytes = a.getBytes();
      b.dtype = a.getDtype().str();
      b.elems = a.getElems();
      bound[a.getResult()] = ::k3::PlanArg::buffer(doc.buffers.size());
      doc.buffers.push_back(b);
    } else if (auto s = dyn_cast<k3l::StateOp>(op)) {
      ::k3::PlanState st;
      st.name = s.getSlot().str();
      st.kind = s.getKind().str();
      st.bytes = s.getBytes();
      st.shape.assign(s.getShape().begin(), s.getShape().end());
      bound[s.getResult()] = ::k3::PlanArg::state(doc.states.size());
      doc.states.push_back(st);
    } else if (auto w = dyn_cast<k3l::WeightOp>(op)) {
      ::k3::TensorSplit split;
      if (std::optional<ArrayRef<int64_t>> s = w.getSplit()) {
        split.axis = static_cast<int>((*s)[0]);
        split.rank = (*s)[1];
        split.ranks = (*s)[2];
      }
      bound[w.getResult()] = ::k3::PlanArg::weight(doc.addWeight(
          w.getName().str(), w.getFormat().str(),
          std::vector<int64_t>(w.getShape().begin(), w.getShape().end()),
          split));
    } else if (auto l = dyn_cast<k3l::LaunchOp>(op)) {
      ::k3::PlanLaunch &pl =
          doc.addLaunch(l.getKernel().str(), l.getOp().str());
      for (int i = 0; i < 3; ++i) {
        pl.grid[i] = l.getGrid()[i];
        pl.block[i] = l.getBlock()[i];
      }
      if (std::optional<ArrayRef<int64_t>> c = l.getCluster())
        std::copy(c->begin(), c->end(), pl.cluster.begin());
      pl.smem = l.getSmem();
      for (auto [i, v] : llvm::enumerate(l.getArgs())) {
        std::string name = cast<StringAttr>(l.getArgNames()[i]).str();
        ::k3::PlanArg arg = bound.lookup(v);
        arg.offset = l.getArgOffsets()[i];
        pl.arg(name, arg);
      }
      for (NamedAttribute s : l.getScalars()) {
        if (auto i = dyn_cast<IntegerAttr>(s.getValue()))
          pl.arg(s.getName().str(), ::k3::PlanArg::integer(i.getInt()));
        else
          pl.arg(s.getName().str(),
                 ::k3::PlanArg::number(
                     cast<FloatAttr>(s.getValue()).getValueAsDouble()));
      }
      for (NamedAttribute in : l.getInputs()) {
        StringRef which = cast<StringAttr>(in.getValue()).getValue();
        ::k3::PlanInput input = which == "token"    ? ::k3::PlanInput::Token
                                : which == "pos"    ? ::k3::PlanInput::Pos
                                : which == "length" ? ::k3::PlanInput::Length
                                                    : ::k3::PlanInput::Step;
        pl.arg(in.getName().str(), ::k3::PlanArg::fromInput(input));
      }
    } else if (auto lg = dyn_cast<k3l::LogitsOp>(op)) {
      ::k3::PlanArg a = bound.lookup(lg.getPtr());
      doc.logitsBuffer = a.index;
    } else if (auto pr = dyn_cast<k3l::ProbeOp>(op)) {
      ::k3::PlanArg a = bound.lookup(pr.getPtr());
      if (a.kind != ::k3::PlanArg::Kind::Buffer || doc.launches.empty())
        return pr.emitOpError()
               << "expects a scratch buffer written by an earlier launch";
      doc.probes.push_back({pr.getName().str(), a.index,
                            static_cast<int64_t>(doc.launches.size())});
    }
  }
  ::k3::Status st = ::k3::validatePlan(doc);
  if (!st)
    return module.emitError()
           << "the emitted plan is invalid: " << st.message();
  // The report: the MLA cache at the planned max context.
  if (report)
    for (size_t i = 0; i < doc.launches.size(); ++i) {
      const ::k3::LaunchBytes b = ::k3::launchBytes(doc, i);
      report->push_back({doc.launches[i].kernel, doc.launches[i].op,
                         static_cast<int64_t>(b.read),
                         static_cast<int64_t>(b.written)});
    }
  // A k3c built with CUDA carries the PTX of every kernel the plan launches
  // (the module that defines it), so the plan runs on a GPU by itself.
  // Each distinct kernel is looked up once (the lookup scans the PTX texts).
  for (const ::k3::PlanLaunch &l : doc.launches) {
    if (doc.kernelModules.count(l.kernel))
      continue;
    if (const ::k3::PtxModule *m = ::k3::ptxModuleFor(l.kernel)) {
      doc.kernelModules.emplace(l.kernel, m->name);
      doc.ptxModules.try_emplace(m->name, m->ptx, m->size); // once per module
    }
  }
  planText = ::k3::serializePlan(doc);
  return success();
}
