//! Item ids: SPEAD's standard items and the ones our wire formats use (docs/wire-formats.md).

/// The null item: spead2 points it at padding so the padding is no other item's value.
pub const NULL: u16 = 0x0000;
/// Heap counter (immediate, mandatory in every packet).
pub const HEAP_CNT: u16 = 0x0001;
/// Heap size in bytes (immediate).
pub const HEAP_SIZE: u16 = 0x0002;
/// Offset of this packet's payload in the heap (immediate, mandatory).
pub const HEAP_OFFSET: u16 = 0x0003;
/// Payload bytes in this packet (immediate, mandatory).
pub const PAYLOAD_LENGTH: u16 = 0x0004;
/// A descriptor: an embedded SPEAD packet (see [`crate::descriptor`]).
pub const DESCRIPTOR: u16 = 0x0005;
/// Stream control; value [`STREAM_CTRL_STOP`] ends the stream.
pub const STREAM_CTRL: u16 = 0x0006;
/// The [`STREAM_CTRL`] value that tells receivers the stream has ended.
pub const STREAM_CTRL_STOP: u64 = 2;

/// Fields of an embedded descriptor packet: the item's name (addressed, text).
pub const DESCRIPTOR_NAME: u16 = 0x0010;
/// The item's description for people (addressed, text).
pub const DESCRIPTOR_DESCRIPTION: u16 = 0x0011;
/// The item's dimensions (addressed, a flag byte and a 48-bit size per dimension).
pub const DESCRIPTOR_SHAPE: u16 = 0x0012;
/// The item's spead2 format, (type code, bits) per field (addressed).
pub const DESCRIPTOR_FORMAT: u16 = 0x0013;
/// The id of the item described (immediate).
pub const DESCRIPTOR_ID: u16 = 0x0014;
/// The item's numpy header, which takes precedence over the format (addressed, text).
pub const DESCRIPTOR_DTYPE: u16 = 0x0015;

/// ADC sample count since the sync epoch.
pub const TIMESTAMP: u16 = 0x1600;
/// Digitiser id: polarisation in bit 0, antenna index above.
pub const DIGITISER_ID: u16 = 0x3101;
/// Digitiser status: bit 0 = saturation in the heap, bits 32-47 = saturated sample count.
pub const DIGITISER_STATUS: u16 = 0x3102;
/// Packed digitiser samples.
pub const ADC_SAMPLES: u16 = 0x3300;
/// F-engine id.
pub const FENG_ID: u16 = 0x4101;
/// First channel of the heap.
pub const FREQUENCY: u16 = 0x4103;
/// F-engine output: int8 (channels, spectra, pols, complex).
pub const FENG_RAW: u16 = 0x4300;
