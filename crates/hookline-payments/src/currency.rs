//! The currencies an intent may be charged in, per provider: ISO 4217 codes the gateway accepts, as lists.
//!
//! Why lists and not a `^[a-z]{3}$` check: `zzz` or `xxx` (ISO's "no currency") passed the regex, reached the
//! outbox and came back from the gateway as a refusal the merchant only saw later as `needs_attention`. Refusing
//! them at the API answers the caller at once, naming the parameter.

use hookline_signature::Scheme;

/// Currencies Stripe charges in: its "Supported currencies" list (stripe.com/docs/currencies, presentment
/// currencies, 2024), lower-case ISO 4217. Includes the real currencies with an X code (XAF, XCD, XOF, XPF);
/// excludes ISO's non-currency X codes (XXX no currency, XTS testing, XAU/XAG/XPD/XPT metals, XDR, …).
pub const STRIPE: &[&str] = &[
    "aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn", "bam", "bbd", "bdt",
    "bgn", "bhd", "bif", "bmd", "bnd", "bob", "brl", "bsd", "bwp", "byn", "bzd", "cad", "cdf",
    "chf", "clp", "cny", "cop", "crc", "cve", "czk", "djf", "dkk", "dop", "dzd", "egp", "etb",
    "eur", "fjd", "fkp", "gbp", "gel", "gip", "gmd", "gnf", "gtq", "gyd", "hkd", "hnl", "htg",
    "huf", "idr", "ils", "inr", "isk", "jmd", "jod", "jpy", "kes", "kgs", "khr", "kmf", "krw",
    "kwd", "kyd", "kzt", "lak", "lbp", "lkr", "lrd", "lsl", "mad", "mdl", "mga", "mkd", "mmk",
    "mnt", "mop", "mur", "mvr", "mwk", "mxn", "myr", "mzn", "nad", "ngn", "nio", "nok", "npr",
    "nzd", "omr", "pab", "pen", "pgk", "php", "pkr", "pln", "pyg", "qar", "ron", "rsd", "rub",
    "rwf", "sar", "sbd", "scr", "sek", "sgd", "shp", "sle", "sos", "srd", "std", "szl", "thb",
    "tjs", "tnd", "top", "try", "ttd", "twd", "tzs", "uah", "ugx", "usd", "uyu", "uzs", "vnd",
    "vuv", "wst", "xaf", "xcd", "xof", "xpf", "yer", "zar", "zmw",
];

/// Currencies Mercado Pago charges in: the `currency_id` of its countries' sites (Argentina ARS, Brazil BRL,
/// Chile CLP, Colombia COP, Mexico MXN, Peru PEN, Uruguay UYU; USD where a site accepts it), from Mercado
/// Pago's developer documentation (`currency_id` of `/v1/payments`).
pub const MERCADO_PAGO: &[&str] = &["ars", "brl", "clp", "cop", "mxn", "pen", "usd", "uyu"];

/// Currencies Pagar.me charges in: only the Brazilian real (its Core API v5 takes amounts in centavos and has no
/// currency field on an order, <https://docs.pagar.me/reference/criar-pedido-2>).
pub const PAGARME_V5: &[&str] = &["brl"];

/// The currencies a provider of `scheme` can be charged in; empty for schemes hookline does not charge.
pub fn accepted(scheme: Scheme) -> &'static [&'static str] {
    match scheme {
        Scheme::Stripe => STRIPE,
        Scheme::MercadoPago => MERCADO_PAGO,
        Scheme::PagarmeV5 => PAGARME_V5,
        _ => &[],
    }
}

/// Whether `code` (lower-case ISO 4217) can be charged through a provider of `scheme`.
pub fn accepts(scheme: Scheme, code: &str) -> bool {
    accepted(scheme).contains(&code)
}

/// Why a currency cannot be charged through a provider ([`check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurrencyError {
    /// Not three ASCII letters.
    #[error("currency must be a three-letter ISO 4217 code")]
    Invalid,
    /// A code the provider does not charge in (`pagarme-v5` takes BRL only).
    #[error(
        "{provider} cannot be charged in {currency}: not one of the ISO 4217 currencies the provider accepts"
    )]
    Unsupported {
        /// The configured provider's name.
        provider: String,
        /// The code asked for, lower-case.
        currency: String,
    },
}

/// THE currency rule of every path that creates a charge — the merchant API, `hookline subscriptions add`, a
/// billing run: `raw` must be three ASCII letters, and (lower-cased) a currency that `provider`, of `scheme`,
/// charges in ([`accepts`]). Returns the lower-case code. A Pagar.me order carries no currency: a subscription
/// entered as `usd` would be charged as that many BRL cents, so it is refused here, not at the gateway.
pub fn check(scheme: Scheme, provider: &str, raw: &str) -> Result<String, CurrencyError> {
    if raw.len() != 3 || !raw.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(CurrencyError::Invalid);
    }
    let code = raw.to_ascii_lowercase();
    if !accepts(scheme, &code) {
        return Err(CurrencyError::Unsupported {
            provider: provider.to_owned(),
            currency: code,
        });
    }
    Ok(code)
}

/// The `(provider, currency)` pairs the configured chargeable providers accept, as the database reads them (the
/// billing status lists the subscriptions of a listed provider whose currency is not among its pairs: rows of an
/// older version, written before [`check`] guarded every path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderCurrencies {
    providers: Vec<String>,
    currencies: Vec<String>,
}

impl ProviderCurrencies {
    /// The pairs of `providers` (`(name, scheme)`); a scheme that is not charged adds none.
    pub fn new<'a>(providers: impl IntoIterator<Item = (&'a str, Scheme)>) -> ProviderCurrencies {
        let mut pairs = ProviderCurrencies::default();
        for (name, scheme) in providers {
            for code in accepted(scheme) {
                pairs.providers.push(name.to_owned());
                pairs.currencies.push((*code).to_owned());
            }
        }
        pairs
    }

    /// The pairs of the configured providers hookline charges through.
    pub fn from_config(config: &hookline_core::Config) -> ProviderCurrencies {
        ProviderCurrencies::new(
            config
                .providers
                .values()
                .map(|p| (p.name.as_str(), p.scheme)),
        )
    }

    /// The pairs as two parallel arrays (provider names, currency codes).
    pub fn arrays(&self) -> (&[String], &[String]) {
        (&self.providers, &self.currencies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_lower_case_codes_without_non_currencies() {
        for list in [STRIPE, MERCADO_PAGO, PAGARME_V5] {
            assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "sorted, no duplicates"
            );
            assert!(list
                .iter()
                .all(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_lowercase())));
            for not_money in ["xxx", "xts", "xau", "xag", "xpd", "xpt", "xdr", "zzz"] {
                assert!(!list.contains(&not_money), "{not_money}");
            }
        }
        assert!(MERCADO_PAGO.iter().all(|c| STRIPE.contains(c)));
    }

    #[test]
    fn one_rule_names_what_is_wrong() {
        assert_eq!(check(Scheme::PagarmeV5, "pg", "BRL"), Ok("brl".into()));
        assert_eq!(check(Scheme::Stripe, "st", "usd"), Ok("usd".into()));
        assert_eq!(
            check(Scheme::PagarmeV5, "pg", "usd"),
            Err(CurrencyError::Unsupported {
                provider: "pg".into(),
                currency: "usd".into()
            })
        );
        for bad in ["", "us", "usdd", "u$d", "12a", "bré"] {
            assert_eq!(
                check(Scheme::Stripe, "st", bad),
                Err(CurrencyError::Invalid),
                "{bad}"
            );
        }
        assert_eq!(
            check(Scheme::PagarmeV5, "pg", "usd")
                .unwrap_err()
                .to_string(),
            "pg cannot be charged in usd: not one of the ISO 4217 currencies the provider accepts"
        );
        let pairs = ProviderCurrencies::new([("pg", Scheme::PagarmeV5), ("gh", Scheme::Github)]);
        assert_eq!(
            pairs.arrays(),
            (&["pg".to_owned()][..], &["brl".to_owned()][..])
        );
    }

    #[test]
    fn providers_differ() {
        assert!(accepts(Scheme::Stripe, "eur"));
        assert!(!accepts(Scheme::MercadoPago, "eur"));
        assert!(accepts(Scheme::MercadoPago, "brl"));
        assert!(accepts(Scheme::PagarmeV5, "brl"));
        for other in ["usd", "eur", "ars"] {
            assert!(!accepts(Scheme::PagarmeV5, other), "{other}");
        }
        assert!(
            !accepts(Scheme::Pagarme, "brl"),
            "legacy postbacks are not charged"
        );
        assert!(!accepts(Scheme::Github, "brl"));
    }
}
