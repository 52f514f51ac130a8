package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amiss-ci/amiss/ledger"
)

// takeMaintenance takes the maintenance lease with the next fence, unless another owner's
// lease is live. Both are decided at the store's time of the maintenance object's answer (a
// 404 carries a Date too): the estimate before it lags by the whole suspension of a host that
// was suspended, and a lease decided on it would end before it was written.
func (l *Ledger) takeMaintenance(ctx context.Context) (maintenanceData, string, error) {
	o, err := l.s.get(ctx, maintenanceName)
	var cur maintenanceData
	create := errors.Is(err, errNotFound)
	if err != nil && !create {
		return cur, "", err
	}
	now := l.nowFor(nil)
	if !create {
		if err := decode(l.s.key(maintenanceName), kindMaintenance, o.body, &cur); err != nil {
			return cur, "", err
		}
		if cur.Owner != l.cfg.Owner && now.Before(time.Unix(0, cur.Until)) {
			return cur, "", fmt.Errorf("%w: maintenance held by %s until %s", ledger.ErrBusy, cur.Owner,
				time.Unix(0, cur.Until).UTC().Format(time.RFC3339))
		}
	}
	next := maintenanceData{Owner: l.cfg.Owner, Fence: cur.Fence + 1, Until: now.Add(l.cfg.MaintenanceLease).UnixNano()}
	body, token, err := l.encode(kindMaintenance, next)
	if err != nil {
		return next, "", err
	}
	tag, err := l.s.put(ctx, maintenanceName, body, token, o.etag, create)
	if err != nil {
		if errors.Is(err, errRaced) {
			return next, "", fmt.Errorf("%w: another cleanup took maintenance", ledger.ErrBusy)
		}
		return next, "", err
	}
	return next, tag, nil
}

// checkMaintenance confirms the lease is still ours and live.
func (l *Ledger) checkMaintenance(ctx context.Context, lease maintenanceData) error {
	o, err := l.s.get(ctx, maintenanceName)
	if err != nil {
		return err
	}
	var cur maintenanceData
	if err := decode(l.s.key(maintenanceName), kindMaintenance, o.body, &cur); err != nil {
		return err
	}
	if cur.Fence != lease.Fence || !l.nowFor(nil).Before(time.Unix(0, cur.Until)) {
		return fmt.Errorf("%w: maintenance lease (fence %d) lost", ledger.ErrLeaseLost, lease.Fence)
	}
	return nil
}

// dropMaintenance ends our lease early so the next pass need not wait for it: a write over the
// version our take wrote (tag), which changes nothing when another owner took it over since.
func (l *Ledger) dropMaintenance(ctx context.Context, lease maintenanceData, tag string) {
	cur := lease
	cur.Until = 0
	if body, token, err := l.encode(kindMaintenance, cur); err == nil {
		l.s.put(ctx, maintenanceName, body, token, tag, false)
	}
}
