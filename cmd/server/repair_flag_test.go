package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --repair-share-state is off by default and set by flag or environment.
func TestRepairShareStateFlag(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.False(t, cfg.RepairShareState)
	cfg, _, err = parseFlags([]string{"--repair-share-state"}, none, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.RepairShareState)
	cfg, _, err = parseFlags(nil, func(k string) string { return map[string]string{"SHARELOG_REPAIR_SHARE_STATE": "true"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.RepairShareState)
}

// --repair-accept-loss is off by default and set by flag or environment.
func TestRepairAcceptLossFlag(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.False(t, cfg.RepairAcceptLoss)
	cfg, _, err = parseFlags([]string{"--repair-accept-loss"}, none, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.RepairAcceptLoss)
	cfg, _, err = parseFlags(nil, func(k string) string { return map[string]string{"SHARELOG_REPAIR_ACCEPT_LOSS": "true"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.RepairAcceptLoss)
	_, _, err = parseFlags(nil, func(k string) string { return map[string]string{"SHARELOG_REPAIR_ACCEPT_LOSS": "maybe"}[k] }, io.Discard)
	assert.ErrorContains(t, err, "SHARELOG_REPAIR_ACCEPT_LOSS")
}
