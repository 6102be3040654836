//! Which file each slot of a bulk batch holds, and the files waiting for a slot.

use std::collections::VecDeque;

use chorus_core::{Error, Result};

const OP: &str = "SlotFiles::new";

/// A file in a slot: its index in the caller's list and its state.
pub(crate) struct Held<T> {
    pub(crate) id: usize,
    pub(crate) slot: usize,
    pub(crate) item: T,
}

/// The slots a batch may use, each empty or holding one file.
pub(crate) struct SlotFiles<T> {
    held: Vec<Option<Held<T>>>,
    slots: Vec<usize>,
    waiting: VecDeque<(usize, T)>,
    /// Slots given a new file since the last step: reset before its first frame.
    fresh: Vec<usize>,
}

impl<T> SlotFiles<T> {
    /// Refuses an empty or repeated slot list.
    pub(crate) fn new(slots: Vec<usize>) -> Result<Self> {
        if slots.is_empty() {
            return Err(Error::config(OP, "a bulk batch needs at least one slot"));
        }
        if let Some(s) = slots
            .iter()
            .enumerate()
            .find_map(|(i, s)| slots[..i].contains(s).then_some(s))
        {
            return Err(Error::config(OP, format!("slot {s} is listed twice")));
        }
        Ok(Self {
            held: slots.iter().map(|_| None).collect(),
            slots,
            waiting: VecDeque::new(),
            fresh: Vec::new(),
        })
    }

    /// Slots that would take a file now.
    pub(crate) fn free(&self) -> usize {
        let empty = self.held.iter().filter(|h| h.is_none()).count();
        empty.saturating_sub(self.waiting.len())
    }

    /// True when no slot holds a file and none waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.held.iter().all(Option::is_none)
    }

    /// Puts file `id` in a free slot, or in the queue when every slot is taken.
    pub(crate) fn admit(&mut self, id: usize, item: T) {
        match self.held.iter().position(Option::is_none) {
            Some(i) => self.place(i, id, item),
            None => self.waiting.push_back((id, item)),
        }
    }

    fn place(&mut self, i: usize, id: usize, item: T) {
        let slot = self.slots[i];
        self.fresh.push(slot);
        self.held[i] = Some(Held { id, slot, item });
    }

    /// Slots given a new file since the last call.
    pub(crate) fn take_fresh(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.fresh)
    }

    /// Every file in a slot, in slot-list order.
    pub(crate) fn held_mut(&mut self) -> impl Iterator<Item = &mut Held<T>> {
        self.held.iter_mut().flatten()
    }

    /// Takes out every file `done` says is finished; their slots take waiting files.
    pub(crate) fn release(&mut self, done: impl Fn(&T) -> bool) -> Vec<(usize, T)> {
        let mut out = Vec::new();
        for i in 0..self.held.len() {
            if self.held[i].as_ref().is_some_and(|h| done(&h.item)) {
                if let Some(h) = self.held[i].take() {
                    out.push((h.id, h.item));
                }
                if let Some((id, item)) = self.waiting.pop_front() {
                    self.place(i, id, item);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_take_free_slots_then_wait_and_fresh_slots_are_reported() {
        let mut s = SlotFiles::new(vec![5, 2]).unwrap();
        assert_eq!(s.free(), 2);
        s.admit(0, 1u32);
        s.admit(1, 0);
        s.admit(2, 3);
        assert_eq!(s.free(), 0);
        assert_eq!(s.take_fresh(), vec![5, 2]);
        let done = s.release(|&left| left == 0);
        assert_eq!(done, vec![(1, 0)]);
        // File 2 took slot 2, which must be reset before its first frame.
        assert_eq!(s.take_fresh(), vec![2]);
        let ids: Vec<(usize, usize)> = s.held_mut().map(|h| (h.id, h.slot)).collect();
        assert_eq!(ids, vec![(0, 5), (2, 2)]);
        assert_eq!(s.release(|_| true).len(), 2);
        assert!(s.is_empty());
    }

    #[test]
    fn bad_slot_lists_are_refused() {
        assert!(SlotFiles::<u8>::new(vec![]).is_err());
        let e = SlotFiles::<u8>::new(vec![1, 3, 1])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("slot 1"), "{e}");
    }
}
