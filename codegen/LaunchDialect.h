//===- LaunchDialect.h - The k3l launch-level dialect -----------*- C++ -*-===//
#ifndef K3C_CODEGEN_LAUNCHDIALECT_H
#define K3C_CODEGEN_LAUNCHDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "codegen/LaunchDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "codegen/LaunchTypes.h.inc"

#define GET_OP_CLASSES
#include "codegen/LaunchOps.h.inc"

#endif // K3C_CODEGEN_LAUNCHDIALECT_H
