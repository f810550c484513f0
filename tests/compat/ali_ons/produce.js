'use strict';
// Sends --count messages with ali-ons' Producer and prints one JSON line per
// message: what was sent and the broker's answer. Tags cycle through --tags
// (comma-separated); {i} in --keys and --body is the message's number;
// --delay-level sets each message's delayTimeLevel (RocketMQ's DELAY).
const { parseArgs } = require('node:util');
const { Producer, Message } = require('ali-ons');

const { values: args } = parseArgs({
  options: {
    namesrv: { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    count: { type: 'string', default: '1' },
    tags: { type: 'string', default: 'TagA' },
    keys: { type: 'string', default: 'key-{i}' },
    body: { type: 'string', default: 'body {i}' },
    'delay-level': { type: 'string', default: '0' },
  },
});

async function main() {
  const producer = new Producer({
    nameSrv: args.namesrv,
    producerGroup: args.group,
    // Asserted by ali-ons, used only to look name servers up over HTTP: nameSrv needs none.
    httpclient: {},
  });
  producer.on('error', err => console.error(err));
  await producer.ready();
  const tags = args.tags.split(',');
  for (let i = 0; i < Number(args.count); i++) {
    const fill = text => text.replaceAll('{i}', String(i));
    // Kept apart: ali-ons replaces a message's body with its deflated form (from 4 KiB).
    const body = fill(args.body);
    const msg = new Message(args.topic, tags[i % tags.length], body);
    msg.keys = [ fill(args.keys) ];
    if (Number(args['delay-level'])) msg.delayTimeLevel = Number(args['delay-level']);
    const result = await producer.send(msg);
    console.log(JSON.stringify({
      sendStatus: result.sendStatus,
      msgId: result.msgId,
      brokerName: result.messageQueue.brokerName,
      queueId: Number(result.messageQueue.queueId),
      queueOffset: result.queueOffset,
      tags: msg.tags,
      keys: msg.keys,
      body,
    }));
  }
  await producer.close();
}

// The client's inner producer keeps its timers running: exit once done.
main().then(() => process.exit(0), err => {
  console.error(err);
  process.exit(1);
});
