//! Turning configured secrets into HMAC key bytes, and picking the secret that matches.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use subtle::{Choice, ConditionallySelectable};

use crate::{Scheme, VerifyError};

/// Lenient standard-alphabet base64 for *secrets*: padded or not, trailing bits tolerated,
/// like the Python Standard Webhooks library (which appends `==` before decoding).
const SECRET_B64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// How a scheme turns the configured string into key bytes.
enum KeyEncoding {
    /// The string's bytes as-is (Stripe keeps `whsec_` as part of the key).
    Utf8,
    /// Optional `whsec_` prefix, then standard base64.
    WhsecBase64,
    /// Hex (Adyen HMAC keys).
    Hex,
}

fn encoding(scheme: Scheme) -> KeyEncoding {
    match scheme {
        Scheme::StandardWebhooks | Scheme::Svix => KeyEncoding::WhsecBase64,
        Scheme::Adyen => KeyEncoding::Hex,
        Scheme::Stripe
        | Scheme::Github
        | Scheme::MercadoPago
        | Scheme::Shopify
        | Scheme::Pagarme
        | Scheme::PagarmeV5 => KeyEncoding::Utf8,
    }
}

/// Derives the key bytes. Error messages describe the problem without quoting the secret.
pub(crate) fn decode(scheme: Scheme, secret: &[u8]) -> Result<Vec<u8>, String> {
    if secret.is_empty() {
        return Err("the secret is empty".to_owned());
    }
    let key = match encoding(scheme) {
        KeyEncoding::Utf8 => secret.to_vec(),
        KeyEncoding::WhsecBase64 => {
            let b64 = secret.strip_prefix(b"whsec_").unwrap_or(secret);
            SECRET_B64
                .decode(b64)
                .map_err(|_| "not valid base64 after the optional 'whsec_' prefix".to_owned())?
        }
        KeyEncoding::Hex => hex::decode(secret)
            .map_err(|_| "not valid hex (Adyen HMAC keys are hex strings)".to_owned())?,
    };
    if key.is_empty() {
        return Err("the secret decodes to zero key bytes".to_owned());
    }
    Ok(key)
}

/// Start-up check: everything [`decode`] rejects, plus mistakes that decode but cannot be right.
pub(crate) fn validate(scheme: Scheme, secret: &[u8]) -> Result<(), String> {
    if std::str::from_utf8(secret).is_err() {
        return Err("the secret is not valid UTF-8".to_owned());
    }
    if secret.first().is_some_and(u8::is_ascii_whitespace)
        || secret.last().is_some_and(u8::is_ascii_whitespace)
    {
        return Err(
            "the secret has leading or trailing whitespace (a newline from a secrets file?)"
                .to_owned(),
        );
    }
    if matches!(encoding(scheme), KeyEncoding::WhsecBase64)
        && (secret.starts_with(b"whsk_") || secret.starts_with(b"whpk_"))
    {
        return Err(
            "this is an ed25519 (v1a) key; only symmetric whsec_ secrets are supported".to_owned(),
        );
    }
    decode(scheme, secret)?;
    if scheme == Scheme::PagarmeV5 {
        validate_basic_credential(secret)?;
    }
    Ok(())
}

/// A Pagar.me v5 webhook credential: `user:password`, bounded, no control characters (it travels in a header).
fn validate_basic_credential(credential: &[u8]) -> Result<(), String> {
    if credential.len() > crate::schemes::pagarme_v5::MAX_CREDENTIAL_BYTES {
        return Err(format!(
            "the credential is longer than {} bytes",
            crate::schemes::pagarme_v5::MAX_CREDENTIAL_BYTES
        ));
    }
    if credential.iter().any(u8::is_ascii_control) {
        return Err("the credential contains control characters".to_owned());
    }
    if !credential.contains(&b':') {
        return Err("expected 'user:password' (no ':' found)".to_owned());
    }
    Ok(())
}

/// The configured secrets of one verification, decoded once.
pub(crate) struct Keys {
    scheme: Scheme,
    /// `None` where the secret could not be decoded; it is skipped, see [`Keys::select`].
    keys: Vec<Option<Vec<u8>>>,
    /// The first undecodable secret, reported only if no other secret matches.
    first_error: Option<(usize, String)>,
}

impl Keys {
    pub(crate) fn decode(scheme: Scheme, secrets: &[&[u8]]) -> Keys {
        let mut first_error = None;
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| match decode(scheme, secret) {
                Ok(key) => Some(key),
                Err(reason) => {
                    first_error.get_or_insert((index, reason));
                    None
                }
            })
            .collect();
        Keys {
            scheme,
            keys,
            first_error,
        }
    }

    /// Number of configured secrets (for error messages).
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Runs `check` with every usable key and returns the index of the first key it accepts.
    ///
    /// Every key is checked, and the winning index is tracked with constant-time selects, so the
    /// running time does not depend on which secret (or which candidate inside `check`) matched.
    /// When none matches, an undecodable secret is reported as [`VerifyError::InvalidSecret`]
    /// (likely a config error), otherwise `mismatch()` builds the error.
    pub(crate) fn select(
        &self,
        mut check: impl FnMut(&[u8]) -> Choice,
        mismatch: impl FnOnce(usize) -> VerifyError,
    ) -> Result<usize, VerifyError> {
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, key) in self.keys.iter().enumerate() {
            let Some(key) = key else { continue };
            let ok = check(key);
            index.conditional_assign(&(i as u64), ok & !found);
            found |= ok;
        }
        if bool::from(found) {
            return Ok(index as usize);
        }
        match &self.first_error {
            Some((index, reason)) => Err(VerifyError::InvalidSecret {
                scheme: self.scheme,
                index: *index,
                reason: reason.clone(),
            }),
            None => Err(mismatch(self.len())),
        }
    }
}
