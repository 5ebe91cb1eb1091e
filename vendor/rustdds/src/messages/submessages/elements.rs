#[cfg(feature = "security")]
pub mod crypto_content;
#[cfg(feature = "security")]
pub mod crypto_footer;
#[cfg(feature = "security")]
pub mod crypto_header;

pub mod inline_qos;
pub mod parameter;
pub mod parameter_list;
pub mod serialized_payload;

pub use crate::RepresentationIdentifier;
