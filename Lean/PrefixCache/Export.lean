import PrefixCache.Spec.Stride
import PrefixCache.Spec.Legacy

/-!
# C entry points

`lake build` compiles the library (with these `@[export]` symbols) into a
shared library. The mask is a `ByteArray`: block `i` is cached when byte `i`
is nonzero; an index at or past the end of the array reads as not cached, so
a short array can never be read out of bounds (and `findHit` never reads at
or past `n` anyway: `strideSearch_boundary_safety`).

Arguments are clamped so that every theorem applies to every input:
`need` and `period` below 1 are treated as 1 (`effNeed`; vLLM derives both
as at least 1), and any nonzero `eagle` byte means EAGLE on.
-/

namespace PrefixCache

/-- Block `i` of a byte mask. -/
def maskCached (mask : ByteArray) (i : Nat) : Bool :=
  mask.data.getD i 0 != 0

/-- The EAGLE flag as a number, 0 or 1. -/
def eagleOf (eagle : UInt8) : Nat := if eagle = 0 then 0 else 1

/-- `findHit` on a byte mask with machine-integer arguments. -/
def findHitMask (mask : ByteArray) (n need period : UInt64) (eagle : UInt8) : HitResult :=
  findHit (maskCached mask) n.toNat need.toNat (effNeed period.toNat) (eagleOf eagle)

/-- `(length, firstReal)` of the hit, as a pair. -/
@[export pc_lean_find_hit]
def findHitExport (mask : ByteArray) (n need period : UInt64) (eagle : UInt8) :
    UInt64 × UInt64 :=
  let r := findHitMask mask n need period eagle
  (UInt64.ofNat r.length, UInt64.ofNat r.firstReal)

/-- The hit length in blocks (a plain scalar, for callers that do not want to
unpack a Lean pair). -/
@[export pc_lean_find_hit_length]
def findHitLengthExport (mask : ByteArray) (n need period : UInt64) (eagle : UInt8) : UInt64 :=
  UInt64.ofNat (findHitMask mask n need period eagle).length

/-- The index of the first real (non-null) block of the hit. -/
@[export pc_lean_find_hit_first_real]
def findHitFirstRealExport (mask : ByteArray) (n need period : UInt64) (eagle : UInt8) :
    UInt64 :=
  UInt64.ofNat (findHitMask mask n need period eagle).firstReal

/-! ## Scalar-only entry points

Every argument and result is a C scalar (`uint64_t`, `uint8_t`), so a
caller needs no Lean object (ctypes cannot build a `ByteArray`:
`lean_alloc_sarray` is an inline function of `lean.h`). The mask is a
64-bit word: block `i < 64` is cached when bit `i` is set; blocks at or past
64 read as misses. -/

/-- Block `i` of a 64-bit mask. -/
def bitCached (mask : UInt64) (i : Nat) : Bool := (mask.toNat / 2 ^ i) % 2 == 1

/-- `findHit` on a 64-bit mask, clamped as `findHitMask`. -/
def findHitBits (mask n need period : UInt64) (eagle : UInt8) : HitResult :=
  findHit (bitCached mask) n.toNat need.toNat (effNeed period.toNat) (eagleOf eagle)

/-- The hit length in blocks. -/
@[export pc_lean_find_hit_bits_length]
def findHitBitsLengthExport (mask n need period : UInt64) (eagle : UInt8) : UInt64 :=
  UInt64.ofNat (findHitBits mask n need period eagle).length

/-- The first real block of the hit. -/
@[export pc_lean_find_hit_bits_first_real]
def findHitBitsFirstRealExport (mask n need period : UInt64) (eagle : UInt8) : UInt64 :=
  UInt64.ofNat (findHitBits mask n need period eagle).firstReal

/-- vLLM's scan (`legacyScan`) on a 64-bit mask: the hit length. -/
@[export pc_lean_legacy_scan_bits_length]
def legacyScanBitsLengthExport (mask n need period : UInt64) (eagle : UInt8) : UInt64 :=
  UInt64.ofNat
    (legacyScan (bitCached mask) n.toNat need.toNat (effNeed period.toNat) (eagleOf eagle)).length

/-- vLLM's scan on a 64-bit mask: the first real block. -/
@[export pc_lean_legacy_scan_bits_first_real]
def legacyScanBitsFirstRealExport (mask n need period : UInt64) (eagle : UInt8) : UInt64 :=
  UInt64.ofNat
    (legacyScan (bitCached mask) n.toNat need.toNat (effNeed period.toNat) (eagleOf eagle)).firstReal

end PrefixCache
