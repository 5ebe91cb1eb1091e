//! Camera messages the node never saw, counted from the gaps in each publisher's sequence
//! numbers.
//!
//! Every DDS writer numbers its samples 1, 2, 3, ... (RTPS sequence numbers, which
//! ros2-client hands over as `MessageInfo::sequence_number`). A sample skipped between two
//! that arrive is one the node lost before it could take it: dropped on the way (best
//! effort over Wi-Fi), overwritten in a reliable writer's keep-last history before it was
//! acknowledged, or overwritten in the subscription's own history while the node was busy.
//! The node's newest-frame accounting (`dropped`) cannot see those; without this count a
//! camera's `sent` and the node's `received` disagree with no figure that says why.
//!
//! What it cannot see, by construction: samples before the first one taken from a
//! publisher (a late joiner with volatile durability was never owed them) and samples
//! after the last one taken. A sample older than one already taken (reordered best-effort
//! delivery) is neither counted nor moves the mark back.

use std::collections::HashMap;

use ros2_client::Gid;

/// The highest sequence number taken so far from each publisher, and the gaps between.
#[derive(Debug, Default)]
pub(crate) struct SequenceGaps {
    newest: HashMap<Gid, i64>,
}

impl SequenceGaps {
    /// Notes the message numbered `sequence` from `publisher`; returns how many of that
    /// publisher's messages were skipped since the newest one taken before it.
    pub(crate) fn observe(&mut self, publisher: Gid, sequence: i64) -> u64 {
        match self.newest.get_mut(&publisher) {
            None => {
                self.newest.insert(publisher, sequence);
                0
            }
            Some(newest) if sequence > *newest => {
                let skipped = sequence - *newest - 1;
                *newest = sequence;
                skipped as u64
            }
            Some(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(n: u8) -> Gid {
        let mut bytes = [0u8; 16];
        bytes[0] = n;
        Gid::from(bytes)
    }

    #[test]
    fn gaps_are_counted_per_publisher_from_the_first_message_taken() {
        let mut gaps = SequenceGaps::default();
        // A late joiner: nothing before 5 is owed.
        assert_eq!(gaps.observe(gid(1), 5), 0);
        assert_eq!(gaps.observe(gid(1), 6), 0);
        assert_eq!(gaps.observe(gid(1), 9), 2);
        // Another camera on the same topic has its own numbering.
        assert_eq!(gaps.observe(gid(2), 1), 0);
        assert_eq!(gaps.observe(gid(2), 3), 1);
        assert_eq!(gaps.observe(gid(1), 10), 0);
    }

    #[test]
    fn a_late_or_repeated_message_neither_counts_nor_moves_the_mark_back() {
        let mut gaps = SequenceGaps::default();
        assert_eq!(gaps.observe(gid(1), 1), 0);
        assert_eq!(gaps.observe(gid(1), 4), 2);
        assert_eq!(gaps.observe(gid(1), 3), 0);
        assert_eq!(gaps.observe(gid(1), 4), 0);
        assert_eq!(gaps.observe(gid(1), 5), 0);
    }
}
