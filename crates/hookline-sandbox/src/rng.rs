//! The sandbox's one source of randomness: SplitMix64 from a seed, so that `--seed N` reproduces every id and every
//! random choice (fault rates, dropped or duplicated deliveries, shuffling) for the same sequence of requests.

/// A seeded SplitMix64 generator. Not cryptographic: ids only need to be unique and look like the provider's.
#[derive(Debug, Clone)]
pub(crate) struct SeededRng {
    state: u64,
}

const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl SeededRng {
    pub(crate) fn new(seed: u64) -> SeededRng {
        SeededRng { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low).saturating_add(1))
    }

    /// True with probability `p` (clamped to 0..=1).
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit < p
    }

    /// `prefix_` followed by `len` alphanumeric characters, the shape of Stripe's ids (`pi_3Mtw…`).
    pub(crate) fn id(&mut self, prefix: &str, len: usize) -> String {
        let mut out = String::with_capacity(prefix.len() + 1 + len);
        out.push_str(prefix);
        out.push('_');
        for _ in 0..len {
            out.push(char::from(ALPHANUMERIC[self.below(62) as usize]));
        }
        out
    }

    /// A version-4 UUID in its canonical text form (Mercado Pago's `x-request-id`).
    pub(crate) fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_ids_and_others_differ() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        let mut c = SeededRng::new(8);
        let ids_a: Vec<String> = (0..5).map(|_| a.id("pi", 24)).collect();
        let ids_b: Vec<String> = (0..5).map(|_| b.id("pi", 24)).collect();
        let ids_c: Vec<String> = (0..5).map(|_| c.id("pi", 24)).collect();
        assert_eq!(ids_a, ids_b);
        assert_ne!(ids_a, ids_c);
        assert!(ids_a
            .iter()
            .all(|id| id.len() == 27 && id.starts_with("pi_")));
    }

    #[test]
    fn uuids_are_version_4() {
        let mut rng = SeededRng::new(1);
        let u = rng.uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
    }

    #[test]
    fn chance_respects_its_bounds() {
        let mut rng = SeededRng::new(3);
        assert!(!(0..1000).any(|_| rng.chance(0.0)));
        assert!((0..1000).all(|_| rng.chance(1.0)));
        let hits = (0..10_000).filter(|_| rng.chance(0.25)).count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
    }
}
