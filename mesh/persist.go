package mesh

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Store keys. Every node's document lives under keyNodePrefix+ID; the local
// one is written synchronously on every change, peers' in batches.
const keyNodePrefix = "mesh/node/"

// load reads the last known documents from the store. The local document
// takes its version from the stored one so versions never go back.
func (m *Mesh) load(local *NodeState) error {
	if m.cfg.DB == nil {
		return nil
	}
	err := m.cfg.DB.Scan([]byte(keyNodePrefix), func(k, v []byte) error {
		s, err := decodeState(slices.Clone(v))
		if err != nil {
			m.log.Warn("skipping unreadable stored node state", "key", string(k), "err", err)
			return nil
		}
		if s.ID == m.id {
			local.Version = s.Version
			if ValidCoordinate(s.Coord) == nil {
				local.Coord = s.Coord
			}
			return nil
		}
		// A peer's document is checked again as if it had just arrived:
		// one stored before this agent verified records (or forged into
		// an agent of an earlier version) must not outlive the upgrade.
		if r := m.checkStored(s); r != nil {
			m.refused("state", r)
			return nil
		}
		m.docs[s.ID] = s
		return nil
	})
	if err != nil {
		return fmt.Errorf("mesh: load state: %w", err)
	}
	err = m.cfg.DB.Scan([]byte(keyKVPrefix), func(k, v []byte) error {
		e, err := decodeEntry(slices.Clone(v))
		if err != nil {
			m.log.Warn("skipping unreadable stored catalog entry", "key", string(k), "err", err)
			return nil
		}
		if r := m.validateEntry(e, time.Now()); r != nil || (m.trust != nil && len(e.Sig) == 0 && !m.trust.cfg.AcceptUnsigned) {
			if r == nil {
				r = refuse(refuseUnsigned, "stored entry %s is not signed", e.Key)
			}
			m.refused("entry", r)
			return nil
		}
		e.stamp(time.Now())
		m.setEntryLocked(e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("mesh: load catalog: %w", err)
	}
	return nil
}

// persistOwn writes the node's own document, as held now, synced.
func (m *Mesh) persistOwn() error {
	if m.cfg.DB == nil {
		return nil
	}
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	m.mu.RLock()
	own := m.docs[m.id]
	m.mu.RUnlock()
	return m.persistSelf(own)
}

func (m *Mesh) persistSelf(s *NodeState) error {
	if m.cfg.DB == nil {
		return nil
	}
	b, err := encodeState(s)
	if err != nil {
		return err
	}
	return m.cfg.DB.Put([]byte(keyNodePrefix+s.ID), b)
}

// flush writes peers' changed documents to the store in one batch.
func (m *Mesh) flush() error {
	if m.cfg.DB == nil {
		return nil
	}
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	m.mu.Lock()
	if len(m.dirty) == 0 && len(m.deleted) == 0 && len(m.dirtyKV) == 0 {
		m.mu.Unlock()
		return nil
	}
	b := m.cfg.DB.NewBatch()
	var errs []error
	for id := range m.dirty {
		if s := m.docs[id]; s != nil {
			enc, err := encodeState(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			b.Put([]byte(keyNodePrefix+id), enc)
		}
	}
	for id := range m.deleted {
		b.Delete([]byte(keyNodePrefix + id))
	}
	for key := range m.dirtyKV {
		if e := m.kv[key]; e != nil && !e.spilled { // a spilled one was stored
			enc, err := encodeEntry(e.full)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			b.Put([]byte(keyKVPrefix+key), enc)
		}
	}
	clear(m.dirtyKV)
	clear(m.dirty)
	clear(m.deleted)
	m.mu.Unlock()
	if err := b.Commit(false); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkStored validates and verifies a peer's document read from the store.
func (m *Mesh) checkStored(s *NodeState) *refusal {
	now := time.Now()
	if r := m.validateState(s, now); r != nil {
		return r
	}
	if m.trust == nil {
		return nil
	}
	return m.trust.verifyDoc(s, s.raw, now)
}
