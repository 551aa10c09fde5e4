//! The seeded random generator of every fake: amounts, names, request ids, UUIDs, re-send picks and orders.

/// xorshift64* — small, fast, reproducible from a seed and good enough to pick amounts and orders; not for
/// anything secret.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded through splitmix64, which spreads similar seeds apart and never leaves the xorshift
    /// state at zero.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// A generator whose xorshift state is `state` itself (zero is replaced by one): the sequence the
    /// benchmark's recorded seeds have always produced.
    pub fn from_state(state: u64) -> Rng {
        Rng(state.max(1))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform-enough in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// In `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// In `0..len` (`len > 0`).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// One of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// `len` characters of `[0-9A-Za-z]`.
    pub fn alnum(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..len).map(|_| char::from(*self.pick(CHARS))).collect()
    }

    /// A version-4-shaped UUID.
    pub fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

/// A seed from the clock and the pid, for runs without an explicit one.
pub fn clock_seed() -> u64 {
    let nanos = crate::since_epoch().as_nanos() as u64;
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!(a.uuid(), b.uuid());
        assert_eq!(a.alnum(14), b.alnum(14));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn ranges_and_uuid_shape() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            assert!((9..=2_499).contains(&r.range(9, 2_499)));
            assert!((0.0..1.0).contains(&r.next_f64()));
        }
        let u = r.uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_eq!(Rng::from_state(0).next_u64(), Rng::from_state(1).next_u64());
    }
}
