import PrefixCache.Spec.Window

/-!
# Arithmetic about the alignment gate

Everything about `%` and `*` the proofs need, derived from three core facts
only (`Nat.mod_add_div`, `Nat.mod_lt`, `Nat.mod_le`) plus
`Nat.mul_succ`. `omega` is only ever asked linear questions: where a `%` or
a product appears it is an opaque term, and the needed facts about it are
passed in explicitly.

Also: introduction and elimination lemmas for the predicates of
`Spec/Window.lean`, so that later proofs never depend on how a definition
unfolds.
-/

namespace PrefixCache

/-! ## Linear helpers -/

theorem sub_eq_of_add_eq' {a b x : Nat} (h : a + b = x) : x - a = b := by omega

theorem le_sub_of_le_sub' {b eg r : Nat} (h : eg ≤ b) (hr : r ≤ b - eg) : eg ≤ b - r := by
  omega

theorem sub_sub_comm' {b eg : Nat} (r : Nat) : b - r - eg = b - eg - r := by omega

theorem le_sub_of_sub_le_sub' {e eg b r : Nat} (h1 : eg ≤ e) (he : e ≤ b)
    (h : e - eg ≤ b - eg - r) : e ≤ b - r := by
  omega

/-! ## `minN` -/

/-- `minN a b` is at most `a` and `b`, and is one of them. -/
theorem minN_spec (a b : Nat) : minN a b ≤ a ∧ minN a b ≤ b ∧ (minN a b = a ∨ minN a b = b) := by
  show (if a ≤ b then a else b) ≤ a ∧ (if a ≤ b then a else b) ≤ b ∧
    ((if a ≤ b then a else b) = a ∨ (if a ≤ b then a else b) = b)
  by_cases h : a ≤ b
  · rw [if_pos h]
    omega
  · rw [if_neg h]
    omega

/-! ## Multiplication is monotone -/

theorem mul_le_mul_add (p a : Nat) : ∀ d : Nat, p * a ≤ p * (a + d)
  | 0 => by
    first
    | exact Nat.le_refl (p * a)
    | simp
  | d + 1 => by
    have ih := mul_le_mul_add p a d
    have e : p * (a + (d + 1)) = p * (a + d) + p := by
      first
      | exact Nat.mul_succ p (a + d)
      | (rw [← Nat.add_assoc]; exact Nat.mul_succ p (a + d))
      | simp only [Nat.mul_add, Nat.mul_one, Nat.add_assoc]
    omega

theorem mul_mono (p : Nat) {a b : Nat} (h : a ≤ b) : p * a ≤ p * b := by
  have h1 := mul_le_mul_add p a (b - a)
  have h2 : a + (b - a) = b := by omega
  rw [h2] at h1
  exact h1

theorem mul_succ' (p q : Nat) : p * (q + 1) = p * q + p := by
  first
  | exact Nat.mul_succ p q
  | simp only [Nat.mul_add, Nat.mul_one]

/-! ## Division with remainder is unique -/

theorem divmod_unique (p x q r q' r' : Nat) (hr : r < p) (hr' : r' < p)
    (hx : r + p * q = x) (hx' : r' + p * q' = x) : r' = r := by
  rcases Nat.lt_or_ge q' q with h | h
  · have h1 : q' + 1 ≤ q := by omega
    have m1 := mul_mono p h1
    have m2 := mul_succ' p q'
    omega
  · rcases Nat.lt_or_ge q q' with h2 | h2
    · have h3 : q + 1 ≤ q' := by omega
      have m1 := mul_mono p h3
      have m2 := mul_succ' p q
      omega
    · have e : q' = q := by omega
      rw [e] at hx'
      omega

theorem mod_eq_of_decomp (p x q r : Nat) (hr : r < p) (hx : r + p * q = x) : x % p = r := by
  have hp : 0 < p := by omega
  exact divmod_unique p x q r (x / p) (x % p) hr (Nat.mod_lt x hp) hx (Nat.mod_add_div x p)

theorem mul_mod_self' (p q : Nat) (hp : 0 < p) : (p * q) % p = 0 :=
  mod_eq_of_decomp p (p * q) q 0 hp (Nat.zero_add (p * q))

/-! ## `realign` -/

theorem sub_mod_eq_mul (x p : Nat) : x - x % p = p * (x / p) :=
  sub_eq_of_add_eq' (Nat.mod_add_div x p)

/-- A re-aligned length is a multiple of `period`. -/
theorem realign_mod (x p : Nat) (hp : 0 < p) : realign x p % p = 0 := by
  show (x - x % p) % p = 0
  rw [sub_mod_eq_mul x p]
  exact mul_mod_self' p (x / p) hp

/-- Re-aligning never lengthens. -/
theorem realign_le (x p : Nat) : realign x p ≤ x := Nat.sub_le x (x % p)

/-- Re-aligning an aligned length changes nothing. -/
theorem realign_of_mod (x p : Nat) (h : x % p = 0) : realign x p = x := by
  show x - x % p = x
  omega

/-! ## `AlignedEnd` and `alignDown` -/

theorem alignedEnd_le {period eg e : Nat} (h : AlignedEnd period eg e) : eg ≤ e :=
  And.left h

theorem alignedEnd_mod {period eg e : Nat} (h : AlignedEnd period eg e) :
    (e - eg) % period = 0 :=
  And.right h

theorem alignedEnd_intro {period eg e : Nat} (h1 : eg ≤ e) (h2 : (e - eg) % period = 0) :
    AlignedEnd period eg e :=
  And.intro h1 h2

theorem alignedEnd_congr {period eg a b : Nat} (h : a = b) (ha : AlignedEnd period eg a) :
    AlignedEnd period eg b := by
  subst h
  exact ha

theorem alignDown_le (b p eg : Nat) : alignDown b p eg ≤ b := Nat.sub_le b ((b - eg) % p)

theorem le_alignDown {b p eg : Nat} (h : eg ≤ b) : eg ≤ alignDown b p eg := by
  show eg ≤ b - (b - eg) % p
  exact le_sub_of_le_sub' h (Nat.mod_le (b - eg) p)

/-- `alignDown b` passes the alignment gate (when `eg ≤ b`). -/
theorem alignDown_aligned {b p eg : Nat} (hp : 0 < p) (h : eg ≤ b) :
    AlignedEnd p eg (alignDown b p eg) := by
  refine alignedEnd_intro (le_alignDown h) ?_
  show (b - (b - eg) % p - eg) % p = 0
  rw [sub_sub_comm' ((b - eg) % p)]
  exact realign_mod (b - eg) p hp

theorem align_max_aux (p y x a q r : Nat) (hr : r < p) (hy : p * a = y)
    (hx : r + p * q = x) (hyx : y ≤ x) : y ≤ x - r := by
  rcases Nat.lt_or_ge q a with h | h
  · have h1 : q + 1 ≤ a := by omega
    have m1 := mul_mono p h1
    have m2 := mul_succ' p q
    omega
  · have h' : a ≤ q := h
    have m1 := mul_mono p h'
    omega

/-- `alignDown b` is the largest aligned end at or below `b`. -/
theorem le_alignDown_of_aligned {b p eg e : Nat} (hp : 0 < p) (ha : AlignedEnd p eg e)
    (he : e ≤ b) : e ≤ alignDown b p eg := by
  have h1 : eg ≤ e := alignedEnd_le ha
  have h2 : (e - eg) % p = 0 := alignedEnd_mod ha
  have hy0 := Nat.mod_add_div (e - eg) p
  have hy : p * ((e - eg) / p) = e - eg := by omega
  have hyx : e - eg ≤ b - eg := by omega
  have key := align_max_aux p (e - eg) (b - eg) ((e - eg) / p) ((b - eg) / p) ((b - eg) % p)
    (Nat.mod_lt (b - eg) hp) hy (Nat.mod_add_div (b - eg) p) hyx
  show e ≤ b - (b - eg) % p
  exact le_sub_of_sub_le_sub' h1 he key

/-! ## Windows -/

theorem validWindow_of_end {cached : Nat → Bool} {n need e : Nat}
    (h1 : need ≤ e) (h2 : e ≤ n) (h3 : AllCached cached (e - need) e) :
    ValidWindow cached n need (e - need) e := by
  have h4 : need ≤ e - (e - need) := by omega
  exact And.intro (Nat.sub_le e need) (And.intro h2 (And.intro h4 h3))

theorem validWindow_end {cached : Nat → Bool} {n need e : Nat}
    (hv : ValidWindow cached n need (e - need) e) :
    need ≤ e ∧ e ≤ n ∧ AllCached cached (e - need) e := by
  have hv' : e - need ≤ e ∧ e ≤ n ∧ need ≤ e - (e - need) ∧ AllCached cached (e - need) e := hv
  obtain ⟨_, h2, h3, h4⟩ := hv'
  have h1 : need ≤ e := by omega
  exact ⟨h1, h2, h4⟩

theorem isRightmost_intro {cached : Nat → Bool} {n need period eg e : Nat}
    (ha : AlignedEnd period eg e) (hv : ValidWindow cached n need (e - need) e)
    (hn : NoValidAfter cached n need period eg e) : IsRightmost cached n need period eg e :=
  And.intro ha (And.intro hv hn)

theorem isRightmost_elim {cached : Nat → Bool} {n need period eg e : Nat}
    (h : IsRightmost cached n need period eg e) :
    AlignedEnd period eg e ∧ ValidWindow cached n need (e - need) e ∧
      NoValidAfter cached n need period eg e :=
  h

/-- There is at most one rightmost valid aligned end. -/
theorem isRightmost_unique {cached : Nat → Bool} {n need period eg e1 e2 : Nat}
    (h1 : IsRightmost cached n need period eg e1) (h2 : IsRightmost cached n need period eg e2) :
    e1 = e2 := by
  obtain ⟨a1, v1, n1⟩ := isRightmost_elim h1
  obtain ⟨a2, v2, n2⟩ := isRightmost_elim h2
  rcases Nat.lt_or_ge e1 e2 with h | h
  · exact False.elim (n1 e2 h a2 v2)
  · rcases Nat.lt_or_ge e2 e1 with h' | h'
    · exact False.elim (n2 e1 h' a1 v1)
    · omega

theorem maxCachedPrefix_intro {cached : Nat → Bool} {limit p : Nat} (h1 : p ≤ limit)
    (h2 : AllCached cached 0 p) (h3 : p < limit → ¬ cached p = true) :
    MaxCachedPrefix cached limit p :=
  And.intro h1 (And.intro h2 h3)

theorem maxCachedPrefix_elim {cached : Nat → Bool} {limit p : Nat}
    (h : MaxCachedPrefix cached limit p) :
    p ≤ limit ∧ AllCached cached 0 p ∧ (p < limit → ¬ cached p = true) :=
  h

/-- The maximal cached prefix is unique. -/
theorem maxCachedPrefix_unique {cached : Nat → Bool} {limit p q : Nat}
    (hp : MaxCachedPrefix cached limit p) (hq : MaxCachedPrefix cached limit q) : p = q := by
  obtain ⟨a1, b1, c1⟩ := maxCachedPrefix_elim hp
  obtain ⟨a2, b2, c2⟩ := maxCachedPrefix_elim hq
  rcases Nat.lt_or_ge p q with h | h
  · have hlt : p < limit := by omega
    exact False.elim (c1 hlt (b2 p (Nat.zero_le p) h))
  · rcases Nat.lt_or_ge q p with h' | h'
    · have hlt : q < limit := by omega
      exact False.elim (c2 hlt (b1 q (Nat.zero_le q) h'))
    · omega

end PrefixCache
