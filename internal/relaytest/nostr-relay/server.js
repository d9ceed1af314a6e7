// A relay on @nostr-relay/core 0.0.40 for provider-agent's tests
// (internal/relaytest runs it as a child process). It is the README example
// of github.com/CodyTseng/nostr-relay (a ws server; every message validated
// by @nostr-relay/validator, handled by NostrRelay, an error answered with a
// NOTICE; events in @nostr-relay/event-repository-sqlite, in memory), plus
// what the harness needs: a free port, "LISTEN ws://host:port" on stdout,
// exit when stdin closes, and the admin endpoints of internal/localrelay.
//
// Flags:
//   --listen host:port     address to listen on (port 0: a free one)
//   --hostname H           NIP-42 hostname (enables AUTH; the relay tag's
//                          hostname must be H, as core checks it)
//   --require-auth         refuse REQ and EVENT before AUTH (a plugin: core
//                          itself only guards DMs); implies --hostname
//                          127.0.0.1 unless given
//   --admin                POST /localrelay/inject, GET /localrelay/stats
//                          (stored events, bytes and EVENTs received, bytes
//                          sent, open connections and subscriptions)
//   --exit-on-stdin-eof    exit when standard input closes
'use strict';

const http = require('http');
const { WebSocketServer } = require('ws');
const { NostrRelay } = require('@nostr-relay/core');
// createOutgoingNoticeMessage lives in common, not core (core's export is
// undefined: the first refused message killed the relay).
const { LogLevel, createOutgoingNoticeMessage } = require('@nostr-relay/common');
const { EventRepositorySqlite } = require('@nostr-relay/event-repository-sqlite');
const { Validator } = require('@nostr-relay/validator');

function parseArgs(argv) {
  const o = { listen: '127.0.0.1:0', hostname: '', requireAuth: false, admin: false, stdinEOF: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--listen': o.listen = argv[++i]; break;
      case '--hostname': o.hostname = argv[++i]; break;
      case '--require-auth': o.requireAuth = true; break;
      case '--admin': o.admin = true; break;
      case '--exit-on-stdin-eof': o.stdinEOF = true; break;
      default:
        process.stderr.write(`nostr-relay server: unknown flag ${a}\n`);
        process.exit(2);
    }
  }
  if (o.requireAuth && !o.hostname) o.hostname = '127.0.0.1';
  return o;
}

// Refuses REQ and EVENT from a client that has not authenticated (NIP-42),
// in NIP-01's words: CLOSED / OK false with "auth-required:".
class RequireAuthPlugin {
  async handleMessage(ctx, message, next) {
    if (ctx.pubkey) return next();
    if (message[0] === 'REQ') {
      ctx.sendMessage(['CLOSED', message[1], 'auth-required: this relay only serves authenticated clients']);
      return { messageType: 'REQ', events: [] };
    }
    if (message[0] === 'EVENT') {
      ctx.sendMessage(['OK', message[1].id, false, 'auth-required: this relay only accepts events from authenticated clients']);
      return { messageType: 'EVENT', success: false };
    }
    return next();
  }
}

// What the stats endpoint reports of the clients' traffic.
const traffic = { eventsIn: 0, bytesIn: 0, bytesOut: 0, kindsIn: {} };

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const eventRepository = new EventRepositorySqlite();
  await eventRepository.init();
  const relay = new NostrRelay(eventRepository, {
    hostname: o.hostname || undefined,
    logLevel: LogLevel.ERROR,
  });
  if (o.requireAuth) relay.register(new RequireAuthPlugin());
  const validator = new Validator();

  const server = http.createServer(async (req, res) => {
    try {
      if (o.admin && req.method === 'POST' && req.url.startsWith('/localrelay/inject')) {
        const body = await readBody(req);
        const event = JSON.parse(body);
        if (new URL(req.url, 'http://x').searchParams.get('store') === '1') {
          await eventRepository.upsert(event);
        }
        await relay.broadcast(event);
        // core's broadcast does not say how many subscriptions got it.
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ delivered: -1 }));
        return;
      }
      if (o.admin && req.method === 'GET' && req.url === '/localrelay/stats') {
        const row = eventRepository.getDatabase().prepare('SELECT COUNT(*) AS n FROM events').get();
        // What ws holds for the clients that the socket has not taken yet
        // (core and ws never drop a client for not reading).
        let pending = 0;
        for (const c of wss.clients) pending += c.bufferedAmount;
        // Open subscriptions as core keeps them: an LRU of at most
        // maxSubscriptionsPerClient (20) per client, the oldest dropped
        // silently. Only open clients' (a message handled after its
        // client's close makes core a context that nothing removes).
        let subs = 0;
        for (const ctx of relay.clientContexts.values()) if (ctx.isOpen) subs += ctx.subscriptions.size;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({
          events: row.n, closed: 0, held: 0, dropped: 0, pending_outbound: pending,
          events_in: traffic.eventsIn, kinds_in: traffic.kindsIn, bytes_in: traffic.bytesIn, bytes_out: traffic.bytesOut,
          connections: wss.clients.size, subscriptions: subs,
        }));
        return;
      }
    } catch (err) {
      res.writeHead(400, { 'Content-Type': 'text/plain' });
      res.end(String(err && err.message));
      return;
    }
    // As ws's own server in the README example: no NIP-11 document.
    res.writeHead(426, { 'Content-Type': 'text/plain' });
    res.end('Upgrade Required');
  });

  const wss = new WebSocketServer({ server });
  wss.on('connection', ws => {
    // Counted for the stats: payload bytes both ways (core sends through
    // ws.send), EVENT messages received.
    const send = ws.send.bind(ws);
    ws.send = (data, ...rest) => {
      traffic.bytesOut += Buffer.byteLength(data);
      return send(data, ...rest);
    };
    relay.handleConnection(ws);
    ws.on('message', async data => {
      traffic.bytesIn += data.length;
      if (data.subarray(0, 12).toString().replace(/\s/g, '').startsWith('["EVENT"')) traffic.eventsIn++;
      try {
        const message = await validator.validateIncomingMessage(data);
        if (message[0] === 'EVENT' && message[1]) {
          const k = String(message[1].kind);
          if (k in traffic.kindsIn || Object.keys(traffic.kindsIn).length < 64) {
            traffic.kindsIn[k] = (traffic.kindsIn[k] || 0) + 1;
          }
        }
        await relay.handleMessage(ws, message);
      } catch (error) {
        if (error instanceof Error) {
          ws.send(JSON.stringify(createOutgoingNoticeMessage(error.message)));
        }
      }
    });
    ws.on('close', () => relay.handleDisconnect(ws));
    ws.on('error', error => {
      ws.send(JSON.stringify(createOutgoingNoticeMessage(error.message)));
    });
  });

  const sep = o.listen.lastIndexOf(':');
  const host = o.listen.slice(0, sep);
  const port = Number(o.listen.slice(sep + 1));
  server.listen(port, host, () => {
    const a = server.address();
    process.stdout.write(`LISTEN ws://${a.address}:${a.port}\n`);
  });

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    for (const c of wss.clients) c.terminate();
    wss.close();
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (o.stdinEOF) {
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', c => {
      size += c.length;
      if (size > 1 << 20) {
        reject(new Error('body too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

main().catch(err => {
  process.stderr.write(`nostr-relay server: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
