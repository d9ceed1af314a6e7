// A second implementation of docs/nip/XX.md, for provider-agent's
// conformance tests (internal/conformance/node_test.go runs it):
//
//   node check.mjs --vectors DIR --out FILE
//
// 1. It builds one event of every kind and form the NIP defines, from the
//    NIP's text alone (its tables, d tag formats, fixed keys and example
//    values), signs them with nostr-tools, and writes them to FILE as
//    [{"example": "FILE#NAME", "event": {...}}] for the Go test to judge.
// 2. It checks every vector in DIR/*.json with nostr-tools' verifyEvent:
//    an event verifies exactly when its "sig_valid" says so, every
//    accepted vector verifies, and no bad_sig or bad_id one does.
//
// It exits 1 on any mismatch, naming each.
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { finalizeEvent, getPublicKey, verifyEvent } from 'nostr-tools/pure'

function arg(name) {
  const i = process.argv.indexOf(name)
  if (i < 0 || i + 1 >= process.argv.length) {
    console.error(`usage: node check.mjs --vectors DIR --out FILE (missing ${name})`)
    process.exit(2)
  }
  return process.argv[i + 1]
}

function hexToBytes(hex) {
  const out = new Uint8Array(hex.length / 2)
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16)
  return out
}

// "Examples and conformance vectors": the fixed keys.
const secrets = {
  primary: '2323495fa3a29a10854e0993cec4654bd3864b6c459c6ad7755dc88be866e72b',
  standby: 'e62d84a9ca8063b54adf37ba0b4265f393722c7ca5935169f25a0c6d54b6c4c4',
  issuer: '4ad80bc6e7aa1b69f470acce262a7b9c63b5a13d8cbe872fceeab3255edc3ad6',
}
const sk = Object.fromEntries(Object.entries(secrets).map(([k, v]) => [k, hexToBytes(v)]))
const pk = Object.fromEntries(Object.entries(sk).map(([k, v]) => [k, getPublicKey(v)]))

// The examples' context and values.
const created = 1767225580 // heartbeats, revocations, claims, records
const grantCreated = 1767222000 // the grant
const workload = 'web-1'
const ttl = 300 // expiration: at least 300 s and at least stale + max_skew (210 s)
const minute = (ts) => Math.floor(ts / 60)

function sign(role, kind, createdAt, tags, content) {
  return finalizeEvent({ kind, created_at: createdAt, tags, content: JSON.stringify(content) }, sk[role])
}

const capacity = { cpu_available: 2000, memory_mb_available: 4096, storage_gb_available: 50 }

// Heartbeat (38384) and its ephemeral copy (20384): t, p, d (38384 only), v, expiration.
// active counts the whole held list, every shard's part.
function heartbeat(kind, workloads, active, shards) {
  const content = {
    provider_npub: pk.primary,
    timestamp: created,
    active_workloads: active,
    available_capacity: capacity,
    version: 1,
    workloads,
  }
  if (shards) content.shards = shards
  const tags = [['t', 'paygress-heartbeat'], ['p', pk.primary]]
  if (kind === 38384) tags.push(['d', `paygress:heartbeat:v1:${pk.primary}:${minute(created)}`])
  tags.push(['v', '1'], ['expiration', String(created + ttl)])
  return sign('primary', kind, created, tags, content)
}

// Heartbeat shard (38389): shard 1 of 2 of a beat.
function shard(workloads) {
  return sign('primary', 38389, created, [
    ['t', 'provider-agent-heartbeat'],
    ['p', pk.primary],
    ['d', `provider-agent:heartbeat:v1:${pk.primary}:${minute(created)}:1`],
    ['v', '1'],
    ['expiration', String(created + ttl)],
  ], { provider_npub: pk.primary, timestamp: created, version: 1, shard: 1, shards: 2, workloads })
}

// Lease grant (38388) by the issuer: d, workload, one p per provider.
function grant() {
  return sign('issuer', 38388, grantCreated, [
    ['d', `provider-agent:lease:v1:${workload}`],
    ['workload', workload],
    ['p', pk.primary],
    ['p', pk.standby],
  ], {
    workload_id: workload,
    primary: pk.primary,
    standbys: [pk.standby],
    relays: ['wss://relay-a.example', 'wss://relay-b.example', 'wss://relay-c.example'],
    quorum: 2,
    replication: 'warm-standby',
    restart_policy: { policy: 'on-failure', max_attempts: 3 },
    command: ['python3', '-m', 'http.server', '8080'],
    expires_at: 0,
    epoch: 1,
  })
}

const manifest = '5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03'
const stateURI = `blossom:${manifest}.json?xs=blossom-a.example`

// Revocation (38385) by the primary, naming the standby as successor.
function revocation() {
  return sign('primary', 38385, created, [
    ['t', 'paygress'],
    ['t', 'paygress-revocation'],
    ['d', `paygress:revocation:v1:${pk.primary}:${workload}`],
    ['v', '1'],
    ['workload', workload],
    ['p', pk.standby],
  ], {
    workload_id: workload,
    primary_provider_npub: pk.primary,
    standby_providers: [pk.standby],
    reason: 'relay quorum lost',
    revoked_at: created,
    state_uri: stateURI,
    version: 1,
    successor: pk.standby,
    epoch: 1,
    quorum_at_ms: (created - 95) * 1000 + 250,
  })
}

// Promotion claim or withdrawn marker (38386 under provider-agent:claim).
function claim(status) {
  return sign('standby', 38386, created, [
    ['t', 'provider-agent-claim'],
    ['d', `provider-agent:claim:v1:${workload}`],
    ['v', '1'],
    ['workload', workload],
  ], { workload_id: workload, new_primary_npub: pk.standby, promoted_at: created, version: 1, epoch: 2, status })
}

// Promotion announcement (38386, Paygress form): no status.
function announcement() {
  return sign('standby', 38386, created, [
    ['t', 'paygress'],
    ['t', 'paygress-promoted'],
    ['d', `paygress:promoted:v1:${workload}`],
    ['v', '1'],
    ['workload', workload],
  ], { workload_id: workload, new_primary_npub: pk.standby, promoted_at: created, version: 1, epoch: 2 })
}

// Checkpoint record (38387) by the primary, holder of epoch 1.
function checkpoint() {
  return sign('primary', 38387, created, [
    ['d', `provider-agent:checkpoint:v1:${workload}:1`],
    ['workload', workload],
    ['t', 'provider-agent-checkpoint'],
    ['v', '1'],
    ['x', manifest],
  ], {
    workload_id: workload,
    holder: pk.primary,
    epoch: 1,
    seq: 3,
    manifest,
    manifest_size: 612,
    size: 1048576,
    sha256: '2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae',
    taken_at_ms: (created - 5) * 1000 + 250,
    servers: ['https://blossom-a.example', 'https://blossom-b.example'],
    state_uri: stateURI,
    grant_at: grantCreated,
    version: 1,
  })
}

const held = [{ id: workload, epoch: 1 }]
const batch = (from, epochs) => epochs.map((epoch, i) => ({ id: `batch-0${from + i}`, epoch }))
const built = [
  { example: 'heartbeat.json#example', event: heartbeat(38384, held, 1) },
  { example: 'heartbeat-ephemeral.json#example', event: heartbeat(20384, held, 1) },
  { example: 'heartbeat.json#shard-0-of-2', event: heartbeat(38384, batch(1, [1, 3, 1]), 6, 2) },
  { example: 'heartbeat-shard.json#example', event: shard(batch(4, [2, 1, 7])) },
  { example: 'lease-grant.json#example', event: grant() },
  { example: 'revocation.json#example', event: revocation() },
  { example: 'claim.json#example', event: claim('active') },
  { example: 'claim.json#withdrawn', event: claim('withdrawn') },
  { example: 'announcement.json#example', event: announcement() },
  { example: 'checkpoint.json#example', event: checkpoint() },
]
writeFileSync(arg('--out'), JSON.stringify(built, null, 2) + '\n')

// Every vector's id and signature, by nostr-tools alone.
const dir = arg('--vectors')
const problems = []
let checked = 0
for (const name of readdirSync(dir).filter((f) => f.endsWith('.json')).sort()) {
  const file = JSON.parse(readFileSync(join(dir, name), 'utf8'))
  for (const v of file.vectors) {
    checked++
    let ok
    try {
      ok = verifyEvent(structuredClone(v.event)) === true
    } catch {
      ok = false // an event nostr-tools cannot serialize
    }
    const where = `${name}#${v.name}`
    if (ok !== v.sig_valid) problems.push(`${where}: nostr-tools verifyEvent = ${ok}, sig_valid says ${v.sig_valid}`)
    if (v.verdict === 'accept' && !ok) problems.push(`${where}: accepted by the agent, but its signature does not verify`)
    if ((v.reason === 'bad_sig' || v.reason === 'bad_id') && ok) problems.push(`${where}: refused ${v.reason} by the agent, but nostr-tools verifies it`)
  }
}
if (checked === 0) problems.push(`no vectors in ${dir}`)
if (problems.length > 0) {
  console.error(problems.join('\n'))
  process.exit(1)
}
console.log(`built ${built.length} events; verified ${checked} vectors`)
