package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplicaAcksSetting(t *testing.T) {
	for in, want := range map[string]ReplicaAcks{"0": {}, "2": {N: 2}, "all": {All: true}, " ALL ": {All: true}} {
		var got ReplicaAcks
		require.NoError(t, got.Decode(in), in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"-1", "every", "1.5", ""} {
		var got ReplicaAcks
		assert.Error(t, got.Decode(in), in)
	}
}

func TestMostReplicasCountsFailedReplicas(t *testing.T) {
	// Master a has two replicas (one failed); master b one; c none (its replica was promoted, and
	// the old master is still down, so it is nobody's replica yet).
	nodes := `a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7003@17003 slave a1 0 0 1 connected
a3 127.0.0.1:7006@17006 slave,fail a1 0 0 1 disconnected
b1 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922
b2 127.0.0.1:7004@17004 slave b1 0 0 2 connected
c2 127.0.0.1:7005@17005 master - 0 0 4 connected 10923-16383
c1 127.0.0.1:7002@17002 master,fail - 0 0 3 disconnected
`
	assert.Equal(t, 2, mostReplicas(nodes))
	assert.Equal(t, 0, mostReplicas(""))
}
