//! Pix: the "copia e cola" code and the QR image of a pending Pix payment
//! (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/integration-configuration/integrate-pix>).

/// A 1×1 PNG: what `qr_code_base64` decodes to (a real one is the QR code's image; no client here reads it).
pub(crate) const QR_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// A Pix "copia e cola" code in the EMV layout Brazil's Pix uses (`000201…6304` + CRC), naming the payment and
/// amount. Not a payable code: nothing outside the sandbox can pay it.
pub(crate) fn pix_code(id: u64, cents: i64) -> String {
    let amount = format!("{}.{:02}", cents / 100, cents % 100);
    let field = |tag: &str, value: &str| format!("{tag}{:02}{value}", value.len());
    let account = field("00", "br.gov.bcb.pix") + &field("01", &format!("sandbox-{id}"));
    let body = field("00", "01")
        + &field("26", &account)
        + &field("52", "0000")
        + &field("53", "986")
        + &field("54", &amount)
        + &field("58", "BR")
        + &field("59", "SANDBOX")
        + &field("60", "SAO PAULO")
        + &field("62", &field("05", &format!("mpqr{id}")))
        + "6304";
    format!("{body}{:04X}", crc16_ccitt(body.as_bytes()))
}

/// CRC-16/CCITT-FALSE, the checksum that ends a Pix code.
fn crc16_ccitt(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0xffff;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pix_codes_end_with_their_checksum() {
        let code = pix_code(123, 1050);
        assert!(code.starts_with("000201"), "{code}");
        assert!(code.contains("540510.50"), "{code}");
        let (body, crc) = code.split_at(code.len() - 4);
        assert_eq!(format!("{:04X}", crc16_ccitt(body.as_bytes())), crc);
        // The reference check value of CRC-16/CCITT-FALSE.
        assert_eq!(crc16_ccitt(b"123456789"), 0x29B1);
    }
}
