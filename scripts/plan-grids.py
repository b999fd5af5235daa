#!/usr/bin/env python3
#===- scripts/plan-grids.py - A plan with other launch grids --------------===#
#
# For exploring launch shapes on the GPU machine (which has no MLIR, so no
# k3c): writes a copy of a plan whose launches of the named kernels get
# their grid scaled by a factor (or set to a fixed size), with the header's
# length and CRC-32 recomputed (docs/PLAN.md "File layout"). Every k3 kernel
# is correct for any grid (kernels/common/CudaCommon.cuh), so a variant
# measures speed only; the GPU tests still compare against the CPU.
#
#   scripts/plan-grids.py IN.plan OUT.plan KERNEL=FACTOR|KERNEL=:SIZE[@BLOCK] ...
#   e.g. scripts/plan-grids.py max.plan max-moe2x.plan moe_experts=2
#        scripts/plan-grids.py a.plan b.plan kda_decode=:32@1024
# (@BLOCK also sets the block's x size; FACTOR@BLOCK scales the grid.)
#
#===----------------------------------------------------------------------===#
import json
import sys
import zlib


def main(argv):
    if len(argv) < 4 or any('=' not in a for a in argv[3:]):
        sys.stderr.write(__doc__ if __doc__ else '')
        sys.stderr.write('usage: plan-grids.py IN.plan OUT.plan '
                         'KERNEL=FACTOR|KERNEL=:SIZE[@BLOCK] ...\n')
        return 2
    src, dst = argv[1], argv[2]
    rules = {}
    for a in argv[3:]:
        k, v = a.split('=', 1)
        block = None
        if '@' in v:
            v, b = v.split('@', 1)
            block = int(b)
        rules[k] = (('set', int(v[1:])) if v.startswith(':')
                    else ('scale', float(v))) + (block,)
    data = open(src, 'rb').read()
    nl = data.index(b'\n')
    header = data[:nl].decode().split()
    if len(header) != 4 or header[0] != 'K3CPLAN':
        sys.stderr.write(f'{src}: not a k3c plan (header {header})\n')
        return 1
    body = json.loads(data[nl + 1:])
    changed = 0
    for launch in body['launches']:
        rule = rules.get(launch['kernel'])
        if not rule:
            continue
        g = launch['grid'][0]
        launch['grid'][0] = max(1, rule[1] if rule[0] == 'set' else int(round(g * rule[1])))
        if rule[2] is not None:
            launch['block'][0] = rule[2]
        changed += 1
    out = json.dumps(body, separators=(',', ':')).encode()
    crc = zlib.crc32(out) & 0xffffffff
    with open(dst, 'wb') as f:
        f.write(f'K3CPLAN {header[1]} {crc:08x} {len(out)}\n'.encode())
        f.write(out)
    print(f'{dst}: {changed} launches regridded')
    return 0 if changed else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
