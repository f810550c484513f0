'use strict';
// Consumes --topic as a member of consumer group --group with ali-ons' push
// Consumer and prints one JSON line per message consumed, and a
// {"queues": [...]} line whenever a rebalance changes the topic's queues it
// pulls. Stops, storing its offsets on the brokers, once it has consumed
// --count messages or when its stdin closes. With --fail-times N its handler
// throws for a message consumed fewer than N times before (ali-ons then sends
// it back to the broker to be retried), printing it with "failed": true.
const { parseArgs } = require('node:util');
const { Consumer } = require('ali-ons');

const { values: args } = parseArgs({
  options: {
    namesrv: { type: 'string' },
    topic: { type: 'string' },
    group: { type: 'string' },
    expression: { type: 'string', default: '*' },
    count: { type: 'string' },
    broadcast: { type: 'boolean', default: false },
    'rebalance-ms': { type: 'string', default: '10000' },
    'fail-times': { type: 'string', default: '0' },
  },
});

const consumer = new Consumer({
  nameSrv: args.namesrv,
  consumerGroup: args.group,
  isBroadcast: args.broadcast,
  consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  rebalanceInterval: Number(args['rebalance-ms']),
  // Asserted by ali-ons, used only to look name servers up over HTTP: nameSrv needs none.
  httpclient: {},
});
consumer.on('error', err => console.error(err));

consumer.on(`topic_${args.topic}_queue_changed`, () => {
  const queues = [ ...consumer.processQueueTable.values() ]
    .map(({ messageQueue }) => messageQueue)
    .filter(mq => mq.topic === args.topic)
    .map(mq => ({ brokerName: mq.brokerName, queueId: Number(mq.queueId) }));
  console.log(JSON.stringify({ queues }));
});

let consumed = 0;
consumer.subscribe(args.topic, args.expression, async (msg, mq) => {
  const failed = msg.reconsumeTimes < Number(args['fail-times']);
  console.log(JSON.stringify({
    failed,
    reconsumeTimes: msg.reconsumeTimes,
    msgId: msg.msgId,
    body: msg.body.toString(),
    tags: msg.tags,
    keys: msg.keys,
    // ali-ons hands a retried message (from the group's retry topic) over without its queue.
    brokerName: mq ? mq.brokerName : null,
    queueId: msg.queueId,
    queueOffset: msg.queueOffset,
  }));
  if (failed) throw new Error(`failing message ${msg.msgId} on purpose`);
  consumed += 1;
  if (args.count && consumed === Number(args.count)) {
    // Once this handler has returned: ali-ons moves the queue's offset past the message then.
    setImmediate(stop);
  }
});

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await consumer.close();
  // The client's inner producer keeps its timers running.
  process.exit(0);
}

process.stdin.on('end', stop).resume();
