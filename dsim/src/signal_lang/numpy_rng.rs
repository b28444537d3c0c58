//! numpy's `SeedSequence` and `PCG64`, bit for bit, so that dither drawn from katgpucbf's dither
//! seed (and the generator state behind `wgn`'s entropy) is the one katgpucbf's dsim draws.
//!
//! Written from numpy's documented algorithms (O'Neill's seed_seq hash mixing with a pool of four
//! 32-bit words; PCG XSL-RR 128/64; `random(dtype=float32)` as the top 24 bits of a 32-bit draw,
//! two 32-bit draws per 64-bit output, low half first). No crate reproduces numpy's seeding:
//! `rand_pcg`'s Lcg128Xsl64 has the same recurrence but draws before it steps, one output off.

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL: usize = 4;

/// numpy's `SeedSequence(entropy, spawn_key=key)`: its mixed pool of four words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedSequence {
    entropy: u128,
    key: Vec<u32>,
    pool: [u32; POOL],
}

/// `value`'s little-endian 32-bit words, at least one (numpy's `_coerce_to_uint32_array`).
fn words(mut value: u128) -> Vec<u32> {
    let mut w = vec![value as u32];
    value >>= 32;
    while value > 0 {
        w.push(value as u32);
        value >>= 32;
    }
    w
}

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

impl SeedSequence {
    pub fn new(entropy: u128) -> Self {
        Self::with_key(entropy, Vec::new())
    }

    fn with_key(entropy: u128, key: Vec<u32>) -> Self {
        let mut run = words(entropy);
        if !key.is_empty() && run.len() < POOL {
            run.resize(POOL, 0);
        }
        run.extend(&key);
        let mut pool = [0u32; POOL];
        let mut h = INIT_A;
        for (i, p) in pool.iter_mut().enumerate() {
            *p = hashmix(run.get(i).copied().unwrap_or(0), &mut h);
        }
        for src in 0..POOL {
            for dst in 0..POOL {
                if src != dst {
                    pool[dst] = mix(pool[dst], hashmix(pool[src], &mut h));
                }
            }
        }
        for &w in run.iter().skip(POOL) {
            for p in pool.iter_mut() {
                *p = mix(*p, hashmix(w, &mut h));
            }
        }
        Self { entropy, key, pool }
    }

    /// Child `i` of this sequence: what `spawn(n)[i]` gives on a sequence that has not spawned
    /// before.
    pub fn child(&self, i: u32) -> Self {
        let mut key = self.key.clone();
        key.push(i);
        Self::with_key(self.entropy, key)
    }

    /// `generate_state(n, uint32)`.
    pub fn state32(&self, n: usize) -> Vec<u32> {
        let mut h = INIT_B;
        (0..n)
            .map(|i| {
                let mut v = self.pool[i % POOL] ^ h;
                h = h.wrapping_mul(MULT_B);
                v = v.wrapping_mul(h);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n, uint64)`: pairs of words, the first the low half.
    pub fn state64(&self, n: usize) -> Vec<u64> {
        self.state32(2 * n)
            .chunks(2)
            .map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32))
            .collect()
    }
}

const PCG_MULT: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// numpy's `PCG64` bit generator, with its buffered 32-bit draws.
#[derive(Clone, Debug)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    spare: Option<u32>,
}

impl Pcg64 {
    /// `PCG64(seed_seq)`, as `np.random.default_rng(seed_seq)` builds it.
    pub fn new(seq: &SeedSequence) -> Self {
        let s = seq.state64(4);
        let initstate = (u128::from(s[0]) << 64) | u128::from(s[1]);
        let initseq = (u128::from(s[2]) << 64) | u128::from(s[3]);
        let mut g = Self {
            state: 0,
            inc: (initseq << 1) | 1,
            spare: None,
        };
        g.step();
        g.state = g.state.wrapping_add(initstate);
        g.step();
        g
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        let rot = (s >> 122) as u32;
        (((s >> 64) as u64) ^ (s as u64)).rotate_right(rot)
    }

    pub fn next_u32(&mut self) -> u32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let v = self.next_u64();
        self.spare = Some((v >> 32) as u32);
        v as u32
    }

    /// `random(dtype=float32)`: uniform on [0, 1) in steps of 2^-24.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / 16_777_216.0)
    }
}

impl rand::RngCore for Pcg64 {
    fn next_u32(&mut self) -> u32 {
        Pcg64::next_u32(self)
    }

    fn next_u64(&mut self) -> u64 {
        Pcg64::next_u64(self)
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let v = Pcg64::next_u64(self).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by numpy 2.5: `SeedSequence(E).generate_state(4)`, the first `next_uint64`
    /// draws of `PCG64(SeedSequence(E))`, and `default_rng(SeedSequence(E).spawn(2)[1])
    /// .random(3, dtype=np.float32)`.
    #[test]
    fn matches_numpy() {
        let seq = SeedSequence::new(12345);
        assert_eq!(seq.state32(4), NUMPY_STATE_12345);
        let mut g = Pcg64::new(&seq);
        assert_eq!([g.next_u64(), g.next_u64()], NUMPY_PCG_12345);
        let big = SeedSequence::new(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        assert_eq!(big.state32(4), NUMPY_STATE_BIG);
        let mut c = Pcg64::new(&SeedSequence::new(7).child(1));
        let u: Vec<f32> = (0..3).map(|_| c.next_f32()).collect();
        assert_eq!(u, NUMPY_UNIFORM_7_1);
    }

    const NUMPY_STATE_12345: [u32; 4] = [2688385916, 3048105090, 4196366895, 3152189807];
    const NUMPY_PCG_12345: [u64; 2] = [4193609425186963869, 5843160025838961886];
    const NUMPY_STATE_BIG: [u32; 4] = [1157132992, 2604139035, 89489123, 3811839316];
    const NUMPY_UNIFORM_7_1: [f32; 3] = [0.681_396_1, 0.480_582, 0.399_028_42];
}
